// absl::Status <-> grpc::Status. The two share the canonical code numbering, so a code crosses
// unchanged; only the message may gain context.
#ifndef LAYERPIPE_COMMON_GRPC_STATUS_H_
#define LAYERPIPE_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace layerpipe {

grpc::Status ToGrpc(const absl::Status& status);

// `where`, when given, prefixes the message ("stage 1 (host:port): ..."), naming the peer that failed.
absl::Status FromGrpc(const grpc::Status& status, absl::string_view where = {});

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_GRPC_STATUS_H_

#include "engine/cuda/links/peer_link_id.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace layerpipe::cuda {
namespace {

// "LPL1", the NCCL part's length as 4 little-endian bytes, the NCCL part, then the IPC name.
constexpr char kTag[] = "LPL1";
constexpr size_t kTagSize = sizeof(kTag) - 1;

}  // namespace

std::string EncodePeerLinkId(const std::string& nccl, const std::string& ipc_name) {
  std::string id(kTag, kTagSize);
  const uint32_t n = static_cast<uint32_t>(nccl.size());
  for (int i = 0; i < 4; ++i) id.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return id + nccl + ipc_name;
}

absl::StatusOr<PeerLinkId> DecodePeerLinkId(const std::string& id) {
  if (id.size() < kTagSize + 4 || id.compare(0, kTagSize, kTag) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a ", id.size(), "-byte string is not a CUDA peer link id"));
  }
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<unsigned char>(id[kTagSize + i])) << (8 * i);
  const size_t rest = id.size() - kTagSize - 4;
  if (n > rest) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CUDA peer link id claims ", n, " bytes of NCCL id but has ", rest, " left"));
  }
  PeerLinkId parts;
  parts.nccl = id.substr(kTagSize + 4, n);
  parts.ipc_name = id.substr(kTagSize + 4 + n);
  if (parts.ipc_name.empty()) return absl::InvalidArgumentError("a CUDA peer link id without a link name");
  return parts;
}

absl::Status ValidatePeerLinkRank(int rank) {
  if (rank == 0 || rank == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("peer link rank ", rank, ": 0 sends, 1 receives"));
}

}  // namespace layerpipe::cuda

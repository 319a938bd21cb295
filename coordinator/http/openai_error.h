// Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with the HTTP status a
// client library turns into the right exception (400 bad request, 401, 403, 404, 413, 429, 503).
#ifndef LAYERPIPE_COORDINATOR_HTTP_OPENAI_ERROR_H_
#define LAYERPIPE_COORDINATOR_HTTP_OPENAI_ERROR_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace layerpipe::http {

struct HttpError {
  int status;
  nlohmann::json body;
};

// The HTTP status and error JSON for a refusal. RESOURCE_EXHAUSTED is 429 (a client over its limit;
// retrying later helps) unless `permanent`: a request that can never fit the KV cache is a bad request.
HttpError ToHttpError(const absl::Status& status, bool permanent = false);
HttpError MakeHttpError(int status, const std::string& message, const std::string& code = {},
                        const std::string& param = {});

}  // namespace layerpipe::http

#endif  // LAYERPIPE_COORDINATOR_HTTP_OPENAI_ERROR_H_

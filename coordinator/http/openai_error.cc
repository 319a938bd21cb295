#include "coordinator/http/openai_error.h"

namespace layerpipe::http {
namespace {

// OpenAI's error types, by HTTP status.
const char* TypeOf(int status) {
  switch (status) {
    case 400:
    case 404:
    case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 429: return "rate_limit_error";
    default: return "server_error";
  }
}

}  // namespace

HttpError MakeHttpError(int status, const std::string& message, const std::string& code, const std::string& param) {
  nlohmann::json e = {{"message", message}, {"type", TypeOf(status)}, {"param", nullptr}, {"code", nullptr}};
  if (!code.empty()) e["code"] = code;
  if (!param.empty()) e["param"] = param;
  return {status, {{"error", e}}};
}

HttpError ToHttpError(const absl::Status& status, bool permanent) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition: return MakeHttpError(400, message);
    case absl::StatusCode::kOutOfRange: return MakeHttpError(400, message, "context_length_exceeded");
    case absl::StatusCode::kUnauthenticated: return MakeHttpError(401, message, "invalid_api_key");
    case absl::StatusCode::kPermissionDenied: return MakeHttpError(403, message);
    case absl::StatusCode::kNotFound: return MakeHttpError(404, message, "not_found");
    case absl::StatusCode::kResourceExhausted:
      return permanent ? MakeHttpError(400, message, "kv_capacity_exceeded") : MakeHttpError(429, message);
    case absl::StatusCode::kUnavailable: return MakeHttpError(503, message);
    case absl::StatusCode::kDeadlineExceeded: return MakeHttpError(504, message);
    case absl::StatusCode::kCancelled: return MakeHttpError(499, message);
    default: return MakeHttpError(500, message);
  }
}

}  // namespace layerpipe::http

#include "engine/sampling/stop_conditions.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace layerpipe {

StopChecker::StopChecker(StopConfig config) : config_(std::move(config)) {
  // An empty stop string would match before any text and end every generation at once.
  std::erase_if(config_.stop_strings, [](const std::string& s) { return s.empty(); });
}

StopChecker::Reason StopChecker::Push(int32_t id, std::string_view new_text) {
  if (reason_ != Reason::kNone) return reason_;
  ++num_tokens_;

  if (std::find(config_.stop_ids.begin(), config_.stop_ids.end(), id) != config_.stop_ids.end()) {
    // The stop token's own text (e.g. "<turn|>") is never shown; whatever was held back is now
    // known not to start a stop string.
    reason_ = Reason::kStopId;
    emittable_ = pending_.size();
    return reason_;
  }

  const size_t scanned = pending_.size();
  pending_.append(new_text);

  // Everything before `scanned` was searched on earlier pushes, so a new match must end inside the
  // new text; starting the search just before it keeps the cost per push independent of the text
  // length.
  size_t match = std::string::npos;
  for (const std::string& stop : config_.stop_strings) {
    const size_t from = scanned >= stop.size() - 1 ? scanned - (stop.size() - 1) : 0;
    match = std::min(match, pending_.find(stop, from));
  }
  if (match != std::string::npos) {
    pending_.resize(match);
    emittable_ = match;
    reason_ = Reason::kStopString;
    return reason_;
  }

  if (config_.max_new_tokens > 0 && num_tokens_ >= config_.max_new_tokens) {
    emittable_ = pending_.size();
    reason_ = Reason::kMaxTokens;
    return reason_;
  }

  emittable_ = pending_.size() - HeldBackLength();
  return Reason::kNone;
}

size_t StopChecker::HeldBackLength() const {
  const std::string_view text = pending_;
  size_t held = 0;
  for (const std::string& stop : config_.stop_strings) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > held; --len) {
      if (text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        held = len;
        break;
      }
    }
  }
  return held;
}

std::string StopChecker::TakeEmittable() {
  std::string out = pending_.substr(0, emittable_);
  pending_.erase(0, emittable_);
  emittable_ = 0;
  return out;
}

std::string StopChecker::Flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  emittable_ = 0;
  return out;
}

std::string_view StopReasonName(StopChecker::Reason reason) {
  switch (reason) {
    case StopChecker::Reason::kNone:
      return "none";
    case StopChecker::Reason::kStopId:
      return "stop_id";
    case StopChecker::Reason::kStopString:
      return "stop_string";
    case StopChecker::Reason::kMaxTokens:
      return "max_tokens";
  }
  return "unknown";
}

namespace {

absl::StatusOr<int32_t> ToTokenId(const nlohmann::json& value, const std::string& path) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned()) {
      const uint64_t v = value.get<uint64_t>();
      if (v <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        return static_cast<int32_t>(v);
    } else {
      const int64_t v = value.get<int64_t>();
      if (v >= 0 && v <= std::numeric_limits<int32_t>::max()) return static_cast<int32_t>(v);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": eos_token_id entries must be non-negative 32-bit integers, got ", value.dump()));
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ReadStopIdsFromGenerationConfig(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) return DefaultStopIds();
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": cannot access: ", ec.message()));
  }
  if (status.type() != std::filesystem::file_type::regular) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::FailedPreconditionError(absl::StrCat(path, ": cannot open for reading"));

  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": top level must be a JSON object"));
  }

  const auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return DefaultStopIds();

  std::vector<int32_t> ids;
  if (it->is_array()) {
    if (it->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": eos_token_id is an empty list"));
    }
    for (const nlohmann::json& entry : *it) {
      absl::StatusOr<int32_t> id = ToTokenId(entry, path);
      if (!id.ok()) return id.status();
      if (std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
    }
  } else {
    absl::StatusOr<int32_t> id = ToTokenId(*it, path);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace layerpipe

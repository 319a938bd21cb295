// libFuzzer target: a StepFrame as a worker receives it (worker_service.cc): the wire bytes parsed with
// StepFrame::ParseFromArray, CheckFrameContent against a stage's shape, and for a stage after the first
// DecodeHidden of the frame's hidden block. Each input is checked against a Gemma-sized shape and a tiny
// one (whose limits short inputs can reach), as the first stage and as a later one.
//
// Checked on every accepted frame: the row count is the sum of the slices' ids and within
// kMaxRowsPerFrame, every id is in the vocabulary, positions stay below the model's limit, decoded hidden
// rows have rows × hidden_size values, and the sampling parameters build a Sampler that samples an id in
// range (what the last stage does with a sequence's first slice).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/sampling/sampler.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/internal.pb.h"
#include "proto/sampling_params.h"
#include "transport/hidden_codec.h"
#include "worker/frame_check.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "step_frame_fuzz: %s\n", what);
  std::abort();
}

void CheckAccepted(const layerpipe::internal::v1::StepFrame& frame, const layerpipe::StageShape& shape,
                   int64_t rows) {
  int64_t total = 0;
  for (const auto& s : frame.slices()) {
    total += s.ids_size();
    Check(s.ids_size() > 0, "an accepted slice without ids");
    Check(s.pos0() >= 0 && s.pos0() + s.ids_size() <= shape.max_positions, "positions past the limit");
    for (int32_t id : s.ids()) Check(id >= 0 && id < shape.vocab_size, "an id outside the vocabulary");
    Check(s.top_logprobs() >= 0 && s.top_logprobs() <= layerpipe::kMaxTopLogprobs, "top_logprobs");
    if (s.has_sampling()) {
      const layerpipe::SamplingParams params = layerpipe::ToSamplingParams(s.sampling());
      Check(layerpipe::ValidateSamplingParams(params).ok(), "sampling accepted by the frame, not the sampler");
      constexpr int kVocab = 64;
      layerpipe::Sampler sampler(params, kVocab);
      sampler.Discard(s.rng_skip() % 1024);
      std::vector<float> logits(kVocab);
      for (int i = 0; i < kVocab; ++i) logits[i] = static_cast<float>((i * 37) % 11) - 5.0f;
      std::vector<int32_t> history(s.ids().begin(), s.ids().end());
      for (int32_t& id : history) id %= kVocab;
      const int32_t token = sampler.Sample(logits, history);
      Check(token >= 0 && token < kVocab, "Sample gave an id outside the row");
    }
  }
  Check(rows == total, "rows is not the sum of the slices' ids");
  Check(rows <= layerpipe::kMaxRowsPerFrame, "more rows than kMaxRowsPerFrame");
  if (shape.first) {
    Check(frame.hidden().empty(), "the first stage accepted hidden");
    return;
  }
  auto hidden = layerpipe::DecodeHidden(frame.hidden_dtype(), frame.hidden(), rows, shape.hidden_size);
  if (hidden.ok()) {
    Check(static_cast<int64_t>(hidden->size()) == rows * shape.hidden_size, "decoded hidden has the wrong size");
  }
}

}  // namespace

// Protobuf logs every string field that is not UTF-8; the parse fails all the same.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  layerpipe::internal::v1::StepFrame frame;
  if (!frame.ParseFromArray(data, static_cast<int>(size))) return 0;
  static const layerpipe::StageShape kShapes[] = {
      {/*hidden_size=*/3840, /*vocab_size=*/262144, /*max_positions=*/131072},
      {/*hidden_size=*/4, /*vocab_size=*/300, /*max_positions=*/64},
  };
  for (layerpipe::StageShape shape : kShapes) {
    for (bool first : {true, false}) {
      shape.first = first;
      int64_t rows = -1;
      const absl::Status st = layerpipe::CheckFrameContent(frame, shape, &rows);
      if (st.ok()) {
        CheckAccepted(frame, shape, rows);
      } else {
        Check(!st.message().empty(), "an error without a message");
      }
    }
  }
  return 0;
}

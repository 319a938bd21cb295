#include "coordinator/scheduling/planner.h"

#include <algorithm>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace layerpipe {
namespace {

double LayerCost(const ModelConfig& c, int l) {
  const double hd = c.HeadDim(l), kv = c.KvHeads(l), H = double(c.hidden_size);
  const double attn = H * (c.num_heads * hd * 2 + kv * hd * (c.HasVProj(l) ? 2 : 1));
  return attn + 3.0 * H * double(c.intermediate_size);
}

}  // namespace

std::vector<LayerRange> PlanLayerRanges(const ModelConfig& c, int workers) {
  const int L = c.num_layers;
  workers = std::clamp(workers, 1, L);
  std::vector<double> prefix(L + 1, 0.0);
  for (int l = 0; l < L; ++l) prefix[l + 1] = prefix[l] + LayerCost(c, l);
  const double head = double(c.vocab_size) * double(c.hidden_size);
  // The embedding is a row lookup, not a matmul: it weighs little next to a layer.
  const double embed = 0.05 * head;
  auto cost = [&](int b, int e, int stage) {
    return prefix[e] - prefix[b] + (stage == 0 ? embed : 0.0) + (stage == workers - 1 ? head : 0.0);
  };
  // best[s][e]: the smallest max cost of splitting layers [0, e) into stages 0..s; cut[s][e] its last cut.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(workers, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(workers, std::vector<int>(L + 1, 0));
  for (int e = 1; e <= L; ++e) best[0][e] = cost(0, e, 0);
  for (int s = 1; s < workers; ++s) {
    for (int e = s + 1; e <= L; ++e) {
      for (int b = s; b < e; ++b) {
        const double v = std::max(best[s - 1][b], cost(b, e, s));
        if (v < best[s][e]) {
          best[s][e] = v;
          cut[s][e] = b;
        }
      }
    }
  }
  std::vector<LayerRange> ranges(workers);
  int e = L;
  for (int s = workers - 1; s >= 0; --s) {
    const int b = s == 0 ? 0 : cut[s][e];
    ranges[s] = {b, e};
    e = b;
  }
  return ranges;
}

absl::StatusOr<std::vector<LayerRange>> ParseLayerSplit(const std::string& text, const ModelConfig& c, int workers) {
  std::vector<LayerRange> ranges;
  int next = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    int b = 0, e = 0;
    if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &b) || !absl::SimpleAtoi(ends[1], &e)) {
      return absl::InvalidArgumentError(absl::StrCat("--layer-split: \"", part, "\" is not FIRST-LAST"));
    }
    if (b != next || e < b) {
      return absl::InvalidArgumentError(absl::StrCat("--layer-split: range ", part, " must start at layer ", next,
                                                     " and not end before it starts"));
    }
    ranges.push_back({b, e + 1});
    next = e + 1;
  }
  if (next != c.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layer-split covers layers 0-", next - 1, " but the model has ", c.num_layers));
  }
  if (static_cast<int>(ranges.size()) != workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layer-split has ", ranges.size(), " ranges for ", workers, " workers"));
  }
  return ranges;
}


}  // namespace layerpipe

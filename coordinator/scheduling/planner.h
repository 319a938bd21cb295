// Splits the decoder layers into contiguous ranges, one per worker in pipeline order.
#ifndef LAYERPIPE_COORDINATOR_PLANNER_H_
#define LAYERPIPE_COORDINATOR_PLANNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"

namespace layerpipe {

struct LayerRange {
  int begin = 0;
  int end = 0;  // exclusive
};

// Minimises the largest stage cost. A layer costs its weight bytes (full layers differ from sliding
// ones); the last stage also pays for the tied head, the first for the embedding lookup.
std::vector<LayerRange> PlanLayerRanges(const ModelConfig& config, int workers);

// Parses an explicit split like "0-4,5-5,6-11" (inclusive ranges). They must cover every layer once,
// in order, one per worker.
absl::StatusOr<std::vector<LayerRange>> ParseLayerSplit(const std::string& text, const ModelConfig& config,
                                                        int workers);

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_PLANNER_H_

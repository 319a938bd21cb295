// The generated checkpoints the benchmarks run on: the real 12B layer shapes and vocabulary with a
// chosen layer count, written once into a work directory and reused by later runs.
#ifndef LAYERPIPE_BENCH_BENCH_CHECKPOINT_H_
#define LAYERPIPE_BENCH_BENCH_CHECKPOINT_H_

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "tools/checkpoint/checkpoint_writer.h"

namespace layerpipe {

inline absl::StatusOr<std::string> TwelveBShapeCheckpoint(const std::string& workdir, int layers) {
  const std::string dir = workdir + "/12b_shape_" + std::to_string(layers) + "L";
  if (std::filesystem::exists(dir + "/config.json")) return dir;
  RandomCheckpointOptions o;  // the real 12B shapes
  o.layers = layers;
  std::printf("generating %s ...\n", dir.c_str());
  std::fflush(stdout);
  if (auto st = WriteRandomCheckpoint(dir, o); !st.ok()) return st;
  return dir;
}

}  // namespace layerpipe

#endif  // LAYERPIPE_BENCH_BENCH_CHECKPOINT_H_

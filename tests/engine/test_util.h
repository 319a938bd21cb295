// Helpers shared by the engine tests: small generated checkpoints in a temp directory.
#ifndef LAYERPIPE_TESTS_ENGINE_TEST_UTIL_H_
#define LAYERPIPE_TESTS_ENGINE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "tools/checkpoint/checkpoint_writer.h"

namespace layerpipe::testing_util {

// A small model with every feature the forward pass has: windows shorter than the test prompts,
// sliding and full layers, k_eq_v, partial rotary, GQA, a hidden size that is not a power of two.
inline RandomCheckpointOptions SmallModel() {
  RandomCheckpointOptions o;
  o.layers = 5;
  o.hidden = 96;
  o.intermediate = 160;
  o.vocab = 300;
  o.heads = 4;
  o.head_dim = 32;
  o.kv_heads = 2;
  o.global_head_dim = 64;
  o.global_kv_heads = 1;
  o.window = 6;
  o.full_period = 3;  // full at 2 (and sliding 0,1,3,4)
  o.max_positions = 4096;
  o.seed = 7;
  o.shards = 2;
  return o;
}

// A fresh directory under the test temp dir, removed when the test binary exits.
inline std::string TempDir(const std::string& name) {
  static std::vector<std::string>* made = [] {
    auto* v = new std::vector<std::string>();
    std::atexit([] {
      std::error_code ec;
      for (const std::string& d : *made) std::filesystem::remove_all(d, ec);
    });
    return v;
  }();
  std::string dir = ::testing::TempDir() + "/layerpipe_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made->push_back(dir);
  return dir;
}

inline std::string MakeCheckpoint(const std::string& name, const RandomCheckpointOptions& o) {
  std::string dir = TempDir(name);
  absl::Status st = WriteRandomCheckpoint(dir, o);
  EXPECT_TRUE(st.ok()) << st;
  return dir;
}

// Rewrites the safetensors file `path` with every tensor `edit` keeps (false drops it; it may change it),
// then `add`.
inline void RewriteTensors(const std::string& path, const std::function<bool(TensorBlob&)>& edit,
                           std::vector<TensorBlob> add = {}) {
  std::vector<TensorBlob> blobs;
  {
    auto f = SafetensorsFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status();
    for (const auto& [name, t] : (*f)->tensors()) {
      TensorBlob b{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
      if (edit(b)) blobs.push_back(std::move(b));
    }
  }
  for (TensorBlob& b : add) blobs.push_back(std::move(b));
  std::vector<const TensorBlob*> ptrs;
  for (const auto& b : blobs) ptrs.push_back(&b);
  ASSERT_TRUE(WriteSafetensors(path, ptrs).ok());
}

}  // namespace layerpipe::testing_util

#endif  // LAYERPIPE_TESTS_ENGINE_TEST_UTIL_H_

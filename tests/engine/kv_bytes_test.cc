// The one KV layout (engine/model/kv_layout.h, kv_bytes.h) against what the CPU cache really allocates.
#include "engine/model/kv_bytes.h"

#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

TEST(KvBytes, PredictsWhatTheCachesAllocate) {
  const std::string dir = testing_util::MakeCheckpoint("kvbytes", testing_util::SmallModel());
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  ThreadPool pool(1);
  for (Precision p : {Precision::kBf16, Precision::kFp32}) {
    for (auto [begin, end] : {std::pair{0, 2}, std::pair{2, 3}, std::pair{1, 5}}) {
      auto w = ModelWeights::Load(dir, *config, WeightSelection{begin, end, begin == 0, false});
      ASSERT_TRUE(w.ok()) << w.status();
      CpuBackend ex(**w, p, pool);
      auto kv = ex.NewSequence();
      EXPECT_EQ(KvBytesAtLength(*config, begin, end, p, 0), 0);
      int64_t length = 0;
      for (int64_t n : {1, 5, 250, 1, 300}) {
        std::vector<float> hidden(n * config->hidden_size, 0.01f);
        SequenceSlice slice{kv.get(), n};
        ASSERT_TRUE(ex.Forward({&slice, 1}, hidden.data()).ok());
        length += n;
        EXPECT_EQ(static_cast<int64_t>(kv->bytes()), KvBytesAtLength(*config, begin, end, p, length))
            << "layers [" << begin << "," << end << ") length " << length;
      }
    }
  }
}

}  // namespace
}  // namespace layerpipe

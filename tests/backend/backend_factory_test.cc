// Device names, and what the factory makes (or refuses) for them on this build and machine.
#include "backend/backend_factory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/config.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/weights.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

TEST(ParseDevice, AcceptsCpuCudaAndCudaWithAnIndex) {
  auto cpu = ParseDevice("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->cuda());
  EXPECT_EQ(cpu->ToString(), "cpu");
  auto cuda = ParseDevice("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(cuda->cuda());
  EXPECT_EQ(cuda->ordinal, 0);
  auto third = ParseDevice("cuda:3");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->ordinal, 3);
  EXPECT_EQ(third->ToString(), "cuda:3");
}

TEST(ParseDevice, RefusesEverythingElseNamingTheForms) {
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cpu:0"}) {
    auto d = ParseDevice(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(d.status().message()).find("cpu, cuda, cuda:N"), std::string::npos) << d.status();
  }
}

TEST(BackendMakerFor, CpuMakesTheExecutorItIsGiven) {
  const std::string dir = testing_util::MakeCheckpoint("backend_factory", testing_util::SmallModel());
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = ModelWeights::Load(dir, *config, WeightSelection{0, config->num_layers, true, true});
  ASSERT_TRUE(weights.ok()) << weights.status();
  ThreadPool pool(1);
  auto maker = BackendMakerFor(DeviceSpec{});
  ASSERT_TRUE(maker.ok()) << maker.status();
  auto backend = (*maker)(**weights, Precision::kFp32, pool);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->device(), "cpu");
  EXPECT_EQ((*backend)->precision(), Precision::kFp32);

  // Same hidden states as a directly made executor.
  CpuBackend direct(**weights, Precision::kFp32, pool);
  const std::vector<int32_t> ids = {2, 7, 9};
  const int64_t H = config->hidden_size;
  std::vector<float> a(ids.size() * H), b(ids.size() * H);
  ASSERT_TRUE((*backend)->Embed(ids, a.data()).ok());
  ASSERT_TRUE(direct.Embed(ids, b.data()).ok());
  auto kv_a = (*backend)->NewSequence();
  auto kv_b = direct.NewSequence();
  SequenceSlice sa{kv_a.get(), 3}, sb{kv_b.get(), 3};
  ASSERT_TRUE((*backend)->Forward({&sa, 1}, a.data()).ok());
  ASSERT_TRUE(direct.Forward({&sb, 1}, b.data()).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(kv_a->length(), 3);
}

TEST(BackendMakerFor, CudaNeedsTheBackendAndAVisibleDevice) {
  auto maker = BackendMakerFor(DeviceSpec{DeviceSpec::Kind::kCuda, 0});
  if (!CudaBackendBuilt()) {
    ASSERT_FALSE(maker.ok());
    EXPECT_EQ(maker.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(maker.status().message()).find("no CUDA backend"), std::string::npos) << maker.status();
  } else if (CudaDevicesVisible() == 0) {
    ASSERT_FALSE(maker.ok());
    EXPECT_EQ(maker.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(maker.status().message()).find("0 CUDA device(s) visible"), std::string::npos)
        << maker.status();
  } else {
    EXPECT_TRUE(maker.ok()) << maker.status();
  }
  // An index past the visible devices is refused either way.
  auto missing = BackendMakerFor(DeviceSpec{DeviceSpec::Kind::kCuda, CudaDevicesVisible() + 100});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace layerpipe

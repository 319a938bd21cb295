// The KV split a worker exports (sliding rings vs full-attention pages, from Stage) and the worker's
// metric names as rendered.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/model/config.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/weights.h"
#include "tests/engine/test_util.h"
#include "engine/model/kv_bytes.h"
#include "common/version.h"
#include "worker/stage.h"
#include "worker/worker_metrics.h"

namespace layerpipe {
namespace {

internal::v1::StepFrame Frame(uint64_t step, uint64_t seq, int64_t pos0, int n) {
  internal::v1::StepFrame f;
  f.set_epoch(1);
  f.set_step_id(step);
  internal::v1::StepSlice* s = f.add_slices();
  s->set_seq_id(seq);
  s->set_pos0(pos0);
  for (int i = 0; i < n; ++i) s->add_ids(3 + i % 50);
  return f;
}

TEST(StageKvSplit, SlidingRingsAndFullPagesAddUpAndAreReleased) {
  const std::string dir = testing_util::MakeCheckpoint("kv_split", testing_util::SmallModel());
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  // Layers 0..2: sliding 0 and 1, full 2.
  auto weights = ModelWeights::Load(dir, *config, WeightSelection{0, 3, true, false});
  ASSERT_TRUE(weights.ok()) << weights.status();
  ThreadPool pool(1);
  StageOptions so;
  so.first = true;
  so.kv_budget_bytes = int64_t{1} << 30;
  std::shared_ptr<const ModelWeights> shared(std::move(*weights));
  Stage stage(shared, so, std::make_unique<CpuBackend>(*shared, so.precision, pool));

  // What one sliding layer's ring takes: the whole window, allocated with the first token.
  const int64_t ring0 = KvBytesAtLength(*config, 0, 1, Precision::kBf16, 1);
  const int64_t ring1 = KvBytesAtLength(*config, 1, 2, Precision::kBf16, 1);
  auto full = [&](int64_t length) { return KvBytesAtLength(*config, 2, 3, Precision::kBf16, length); };

  internal::v1::StepFrame forward;
  internal::v1::StepResult result;
  ASSERT_TRUE(stage.Run(Frame(1, 7, 0, 10), {}, &forward, &result).ok());
  EXPECT_EQ(stage.kv_sliding_bytes_used(), ring0 + ring1);
  EXPECT_EQ(stage.kv_bytes_used() - stage.kv_sliding_bytes_used(), full(10));
  // A second sequence, and the first one growing past a page: rings stay, pages grow.
  ASSERT_TRUE(stage.Run(Frame(2, 8, 0, 4), {}, &forward, &result).ok());
  ASSERT_TRUE(stage.Run(Frame(3, 7, 10, 300), {}, &forward, &result).ok());
  EXPECT_EQ(stage.kv_sliding_bytes_used(), 2 * (ring0 + ring1));
  EXPECT_EQ(stage.kv_bytes_used() - stage.kv_sliding_bytes_used(), full(310) + full(4));
  EXPECT_GT(full(310), full(10));

  google::protobuf::RepeatedField<uint64_t> release;
  release.Add(7);
  stage.Release(release);
  EXPECT_EQ(stage.kv_sliding_bytes_used(), ring0 + ring1);
  EXPECT_EQ(stage.kv_bytes_used() - stage.kv_sliding_bytes_used(), full(4));
  release.Clear();
  release.Add(8);
  stage.Release(release);
  EXPECT_EQ(stage.kv_sliding_bytes_used(), 0);
  EXPECT_EQ(stage.kv_bytes_used(), 0);
}

TEST(WorkerMetrics, ExportsLevelsAndCounts) {
  WorkerMetrics::Levels levels;
  levels.stage = 1;
  levels.kv_sliding_bytes = 100;
  levels.kv_full_bytes = 400;
  levels.kv_capacity_bytes = 1000;
  levels.sequences = 2;
  levels.queued_steps = 3;
  levels.idle_seconds = 1.5;
  levels.transfer_seconds = 0.25;
  WorkerMetrics m([&] { return levels; });
  m.OnStep(0.5);
  m.OnStep(0.25);
  m.OnRejected(absl::StatusCode::kAlreadyExists);
  const std::string text = m.registry().Render();
  for (const char* line : {"layerpipe_worker_stage 1\n", "layerpipe_worker_kv_bytes_used{kind=\"sliding\"} 100\n",
                           "layerpipe_worker_kv_bytes_used{kind=\"full\"} 400\n",
                           "layerpipe_worker_kv_bytes_free 500\n", "layerpipe_worker_kv_bytes_capacity 1000\n",
                           "layerpipe_worker_sequences 2\n", "layerpipe_worker_queued_steps 3\n",
                           "# TYPE layerpipe_worker_idle_seconds_total counter\nlayerpipe_worker_idle_seconds_total 1.5\n",
                           "layerpipe_worker_transfer_seconds_total 0.25\n", "layerpipe_worker_steps_total 2\n",
                           "layerpipe_worker_compute_seconds_total 0.75\n", "layerpipe_worker_step_seconds_count 2\n",
                           "layerpipe_worker_frames_rejected_total{code=\"ALREADY_EXISTS\"} 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
  }
  // Levels are read at scrape time.
  levels.sequences = 0;
  EXPECT_NE(m.registry().Render().find("layerpipe_worker_sequences 0\n"), std::string::npos);
  // The version and the process's resources, like the coordinator's.
  EXPECT_NE(text.find(std::string("\nlayerpipe_build_info{version=\"") + Version() + "\"} 1\n"), std::string::npos)
      << text;
  for (const char* type_line :
       {"# TYPE process_resident_memory_bytes gauge\n", "# TYPE process_virtual_memory_bytes gauge\n",
        "# TYPE process_cpu_seconds_total counter\n", "# TYPE process_open_fds gauge\n",
        "# TYPE process_max_fds gauge\n", "# TYPE process_start_time_seconds gauge\n"}) {
    EXPECT_NE(text.find(type_line), std::string::npos) << type_line << " not in\n" << text;
  }
}

}  // namespace
}  // namespace layerpipe

// Workers started in-process on loopback, chained into a pipeline, fed StepFrames the way the
// coordinator does, with a fake coordinator collecting the StepResults. The pipeline must give what
// the single-process Engine gives, and a bad frame must cost only its own step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/sampling/sampler.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/internal.grpc.pb.h"
#include "tests/engine/test_util.h"
#include "tests/worker/pipeline_harness.h"
#include "engine/model/kv_bytes.h"
#include "worker/worker_server.h"

namespace layerpipe {
namespace {

using namespace testing_pipeline;  // NOLINT: the harness is this file's vocabulary

class WorkerPipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing_util::MakeCheckpoint("worker_pipeline", testing_util::SmallModel()));
  }
  static void TearDownTestSuite() { delete dir_; }
  static const std::string& dir() { return *dir_; }
  static std::string* dir_;
};
std::string* WorkerPipelineTest::dir_ = nullptr;

TEST_F(WorkerPipelineTest, GreedyTokensAndLogprobsEqualTheEngineFp32) {
  Pipeline pipe(3);
  pipe.Assign(dir(), kThreeStages, "fp32");
  auto engine = LoadEngine(dir(), Precision::kFp32);
  CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
}

TEST_F(WorkerPipelineTest, GreedyTokensAndLogprobsEqualTheEngineBf16) {
  Pipeline pipe(3);
  pipe.Assign(dir(), kThreeStages, "bf16");
  auto engine = LoadEngine(dir(), Precision::kBf16);
  // Stages hand each other the fp32 residual, so a split bf16 pipeline equals one bf16 process.
  CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
}

TEST_F(WorkerPipelineTest, AFrameWithoutTheEpochSecretLeavesNoTrace) {
  Pipeline pipe(3);
  const std::string secret = "epoch-secret-1";
  pipe.Assign(dir(), kThreeStages, "fp32", 0, secret);
  auto engine = LoadEngine(dir(), Precision::kFp32);
  // An outsider sprays stages 1 and 2 with frames for the step ids the pipeline is about to use (a NaN
  // temperature, hidden rows of the wrong size), without the secret or with a guessed one.
  for (int stage : {1, 2}) {
    for (uint64_t step = 1; step <= 4; ++step) {
      for (const std::string guess : {"", "epoch-secret-0"}) {
        internal::v1::StepFrame f;
        f.set_epoch(pipe.epoch);
        f.set_step_id(step);
        f.set_epoch_secret(guess);
        AddSlice(&f, 900 + step, 0, {2, 3}, true)->mutable_sampling()->set_temperature(std::nanf(""));
        f.set_hidden("xyz");
        const grpc::Status st = pipe.Send(stage, f);
        EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
        EXPECT_NE(st.error_message().find("secret"), std::string::npos) << st.error_message();
      }
    }
  }
  // The real steps then run as if nothing had come: the engine's tokens, and results that carry the secret.
  CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
  internal::v1::StepFrame f;
  AddSlice(&f, 5, 0, {2, 5, 6}, true);
  const internal::v1::StepResult r = pipe.Run(f);
  EXPECT_TRUE(r.error().empty()) << r.error();
  EXPECT_EQ(r.epoch_secret(), secret);
}

TEST_F(WorkerPipelineTest, TwoStagesAndReassignmentGiveTheSameTokens) {
  Pipeline pipe(3);
  pipe.Assign(dir(), {{0, 4}, {4, 5}}, "fp32");
  auto engine = LoadEngine(dir(), Precision::kFp32);
  CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
  // A new epoch over a different split drops every sequence and starts step ids again.
  pipe.Assign(dir(), kThreeStages, "fp32");
  for (int i = 0; i < 3; ++i) {
    const internal::v1::WorkerStatus s = pipe.Status(i);
    EXPECT_EQ(s.epoch(), pipe.epoch);
    EXPECT_TRUE(s.assigned());
    EXPECT_EQ(s.sequences(), 0);
    EXPECT_EQ(s.kv_bytes_used(), 0);
    EXPECT_EQ(s.layer_begin(), kThreeStages[i].first);
    EXPECT_EQ(s.layer_end(), kThreeStages[i].second);
  }
  CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
}

// Workers whose weights sit in huge pages store them tiled where the bf16 kernel reads that order;
// an assignment that switches the precision over the same layers loads them again in the other order,
// and each precision serves the tokens of one process.
TEST_F(WorkerPipelineTest, HugePageWorkersSwitchPrecisionOverTheSameLayers) {
  Pipeline pipe(3, absl::Seconds(2), [](int, WorkerOptions& o) { o.huge_pages = true; });
  for (Precision precision : {Precision::kBf16, Precision::kFp32, Precision::kBf16}) {
    pipe.Assign(dir(), kThreeStages, PrecisionName(precision));
    auto engine = LoadEngine(dir(), precision);
    CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
  }
}

TEST_F(WorkerPipelineTest, SeededSamplingMatchesTheEngineAndResumesWithRngSkip) {
  Pipeline pipe(3);
  pipe.Assign(dir(), kThreeStages, "fp32");
  auto engine = LoadEngine(dir(), Precision::kFp32);
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.2f;
  p.seed = 1234;
  constexpr int kTokens = 10;
  const Generation want = EngineGenerate(*engine, kPromptA, kTokens, p);

  const std::vector<int32_t> got = PipelineGenerate(pipe, 1, kPromptA, kTokens, p);
  EXPECT_EQ(got, want.tokens);

  // Replay as a new sequence: the prompt and the first 4 tokens in one slice, RNG 4 draws on.
  constexpr int kKept = 4;
  std::vector<int32_t> replay = kPromptA;
  replay.insert(replay.end(), want.tokens.begin(), want.tokens.begin() + kKept);
  std::vector<int32_t> resumed;
  {
    internal::v1::StepFrame f;
    internal::v1::StepSlice* s = AddSlice(&f, 2, 0, replay, true);
    SetSampling(s, p);
    s->set_rng_skip(kKept);
    f.add_release(1);
    resumed.push_back(pipe.Run(f).results(0).token());
  }
  while (kKept + resumed.size() < kTokens) {
    internal::v1::StepFrame f;
    AddSlice(&f, 2, replay.size() + resumed.size() - 1, {resumed.back()}, true);
    resumed.push_back(pipe.Run(f).results(0).token());
  }
  EXPECT_EQ(resumed, std::vector<int32_t>(want.tokens.begin() + kKept, want.tokens.end()));
}

// A CPU last stage answers a greedy or top-k row from a logit summary and a temperature or top-p row
// from the whole row (a GPU stage summarises those too: device_handoff_test); either way the token's
// logprob and the top logprobs are those of the model's full distribution.
TEST_F(WorkerPipelineTest, SampledLogprobsAreThoseOfTheWholeRowWithOrWithoutASummary) {
  Pipeline pipe(3);
  pipe.Assign(dir(), kThreeStages, "fp32");
  auto engine = LoadEngine(dir(), Precision::kFp32);
  const int64_t V = engine->config().vocab_size;
  auto kv = engine->NewSequence();
  StepInput in{kv.get(), kPromptA};
  auto logits = engine->Step({&in, 1});
  ASSERT_TRUE(logits.ok()) << logits.status();
  const std::vector<double> lsm = LogSoftmax((*logits)[0].data(), V);
  std::vector<int32_t> order(V);
  for (int32_t i = 0; i < V; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return lsm[a] > lsm[b]; });

  uint64_t seq = 10;
  for (const SamplingParams& p : {SamplingParams{.temperature = 0},
                                  SamplingParams{.temperature = 0.9f, .top_k = 7, .repetition_penalty = 1.3f, .seed = 5},
                                  SamplingParams{.temperature = 0.9f, .min_p = 0.01f, .seed = 6},
                                  SamplingParams{.temperature = 0.9f, .top_p = 0.8f, .seed = 5}}) {
    SCOPED_TRACE(::testing::Message() << "temperature " << p.temperature << " top_k " << p.top_k);
    internal::v1::StepFrame f;
    internal::v1::StepSlice* s = AddSlice(&f, ++seq, 0, kPromptA, true);
    SetSampling(s, p);
    s->set_top_logprobs(5);
    const internal::v1::StepResult r = pipe.Run(f);
    ASSERT_EQ(r.results_size(), 1) << r.error();
    const internal::v1::SliceResult& res = r.results(0);
    Sampler sampler(p, static_cast<int>(V));
    EXPECT_EQ(res.token(), sampler.Sample((*logits)[0], kPromptA));
    EXPECT_NEAR(res.logprob(), lsm[res.token()], 1e-5);
    ASSERT_EQ(res.top_size(), 5);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(res.top(i).id(), order[i]) << i;
      EXPECT_NEAR(res.top(i).logprob(), lsm[order[i]], 1e-5) << i;
    }
  }
}

TEST_F(WorkerPipelineTest, ScoresAndLogitsEqualTheEngine) {
  Pipeline pipe(3);
  pipe.Assign(dir(), kThreeStages, "fp32");
  auto engine = LoadEngine(dir(), Precision::kFp32);
  const std::vector<int32_t> ids = {2, 17, 93, 5, 201, 44, 8, 150, 77, 12, 3};
  const int64_t V = engine->config().vocab_size, n = ids.size();
  auto logits = engine->Score(ids);
  ASSERT_TRUE(logits.ok()) << logits.status();
  std::vector<double> want;  // log p(ids[i+1] | ids[..i]), then log p(42 | all)
  for (int64_t r = 0; r < n; ++r) {
    const auto lsm = LogSoftmax(logits->data() + r * V, V);
    want.push_back(lsm[r + 1 < n ? ids[r + 1] : 42]);
  }

  // Whole, with a following id and the logits.
  {
    internal::v1::StepFrame f;
    internal::v1::StepSlice* s = AddSlice(&f, 1, 0, ids, false);
    s->set_score(true);
    s->set_return_logits(true);
    s->set_next_id(42);
    const internal::v1::StepResult r = pipe.Run(f);
    ASSERT_EQ(r.results_size(), 1) << r.error();
    ASSERT_EQ(r.results(0).score_logprobs_size(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(r.results(0).score_logprobs(i), want[i], 1e-5) << i;
    ASSERT_EQ(r.results(0).logits_size(), n * V);
    for (int64_t i = 0; i < n * V; ++i) ASSERT_EQ(r.results(0).logits(i), (*logits)[i]) << i;
  }
  // In two chunks: the first names the id that follows it, the last none (-1).
  {
    internal::v1::StepFrame f;
    internal::v1::StepSlice* s = AddSlice(&f, 2, 0, {ids.begin(), ids.begin() + 6}, false);
    s->set_score(true);
    s->set_next_id(ids[6]);
    const internal::v1::StepResult r = pipe.Run(f);
    ASSERT_EQ(r.results_size(), 1) << r.error();
    ASSERT_EQ(r.results(0).score_logprobs_size(), 6);
    EXPECT_EQ(r.results(0).logits_size(), 0);
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(r.results(0).score_logprobs(i), want[i], 1e-5) << i;
  }
  {
    internal::v1::StepFrame f;
    internal::v1::StepSlice* s = AddSlice(&f, 2, 6, {ids.begin() + 6, ids.end()}, true);
    s->set_score(true);
    s->set_next_id(-1);
    const internal::v1::StepResult r = pipe.Run(f);
    ASSERT_EQ(r.results_size(), 1) << r.error();
    ASSERT_EQ(r.results(0).score_logprobs_size(), n - 7);
    for (int i = 0; i < n - 7; ++i) EXPECT_NEAR(r.results(0).score_logprobs(i), want[6 + i], 1e-5) << i;
    // Sampled too: greedy over the last row.
    const float* last = logits->data() + (n - 1) * V;
    EXPECT_EQ(r.results(0).token(), std::max_element(last, last + V) - last);
  }
}

TEST_F(WorkerPipelineTest, KvIsAccountedAndReleasedOnEveryStage) {
  Pipeline pipe(3);
  pipe.Assign(dir(), kThreeStages, "bf16");
  auto config = LoadModelConfig(dir());
  ASSERT_TRUE(config.ok());
  internal::v1::StepFrame f;
  AddSlice(&f, 1, 0, kPromptA, true);
  AddSlice(&f, 2, 0, std::vector<int32_t>(300, 7), false);  // more than one page of the full layer
  ASSERT_TRUE(pipe.Run(f).error().empty());
  for (int i = 0; i < 3; ++i) {
    const auto [b, e] = kThreeStages[i];
    const internal::v1::WorkerStatus s = pipe.Status(i);
    EXPECT_EQ(s.sequences(), 2);
    EXPECT_EQ(s.kv_bytes_used(), KvBytesAtLength(*config, b, e, Precision::kBf16, kPromptA.size()) +
                                     KvBytesAtLength(*config, b, e, Precision::kBf16, 300))
        << "stage " << i;
    EXPECT_EQ(s.kv_capacity_bytes(), int64_t{1} << 30);
    EXPECT_EQ(s.steps(), 1);
    EXPECT_GT(s.compute_ms_total(), 0);
  }
  EXPECT_GT(pipe.Status(0).transfer_ms_total(), 0);

  // A frame with only releases (and an id nobody holds) passes through every stage.
  internal::v1::StepFrame release;
  release.add_release(1);
  release.add_release(2);
  release.add_release(999);
  const uint64_t id = pipe.Push(release);
  const auto done = pipe.sink.Wait(pipe.epoch, id);  // every step is answered, even one that only releases
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(done->error().empty()) << done->error();
  EXPECT_EQ(done->results_size(), 0);
  EXPECT_TRUE(pipe.WaitUntilEmpty());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pipe.Status(i).steps(), 2);
}

TEST_F(WorkerPipelineTest, KvBudgetRefusesAStepAndTheStageRecovers) {
  Pipeline pipe(3);
  auto config = LoadModelConfig(dir());
  ASSERT_TRUE(config.ok());
  // Stage 1 serves the full layer: one page per sequence fits, a second sequence does not.
  const int64_t budget = KvBytesAtLength(*config, 2, 3, Precision::kBf16, 1);
  pipe.Assign(dir(), kThreeStages, "bf16", budget);
  EXPECT_EQ(pipe.Status(1).kv_capacity_bytes(), budget);
  {
    internal::v1::StepFrame f;
    AddSlice(&f, 1, 0, kPromptA, true);
    EXPECT_TRUE(pipe.Run(f).error().empty());
  }
  {
    internal::v1::StepFrame f;
    AddSlice(&f, 2, 0, kPromptB, true);
    const internal::v1::StepResult r = pipe.Run(f);
    EXPECT_EQ(r.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << r.error();
    EXPECT_EQ(r.stage(), 1);
    EXPECT_NE(r.error().find("budget"), std::string::npos) << r.error();
    EXPECT_EQ(r.results_size(), 0);
  }
  internal::v1::StepFrame release;
  release.add_release(1);
  release.add_release(2);  // stage 0 took it before stage 1 refused
  pipe.Push(release);
  {
    internal::v1::StepFrame f;
    AddSlice(&f, 2, 0, kPromptB, true);
    const internal::v1::StepResult r = pipe.Run(f);
    EXPECT_TRUE(r.error().empty()) << r.error();
    EXPECT_EQ(r.results_size(), 1);
  }
  EXPECT_EQ(pipe.Status(1).kv_bytes_used(), budget);
}

TEST_F(WorkerPipelineTest, BadFramesGetPreciseErrorsAndTheWorkerKeepsServing) {
  Pipeline pipe(3);
  auto engine = LoadEngine(dir(), Precision::kBf16);
  const Generation want = EngineGenerate(*engine, kPromptA, 2, SamplingParams());
  {
    internal::v1::StepFrame f;
    f.set_step_id(1);
    AddSlice(&f, 1, 0, kPromptA, true);
    EXPECT_EQ(pipe.Send(0, f).error_code(), grpc::StatusCode::FAILED_PRECONDITION);  // nothing assigned yet
  }
  pipe.Assign(dir(), kThreeStages, "bf16");
  const uint64_t epoch = pipe.epoch;
  auto frame = [&](uint64_t step) {
    internal::v1::StepFrame f;
    f.set_epoch(epoch);
    f.set_step_id(step);
    return f;
  };
  auto expect_code = [&](int stage, const internal::v1::StepFrame& f, grpc::StatusCode code, const std::string& words) {
    const grpc::Status st = pipe.Send(stage, f);
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_NE(st.error_message().find(words), std::string::npos) << st.error_message();
  };

  internal::v1::StepFrame f = frame(1);
  AddSlice(&f, 1, 0, kPromptA, true);
  f.set_epoch(epoch - 1);
  expect_code(0, f, grpc::StatusCode::FAILED_PRECONDITION, "epoch");
  f.set_epoch(epoch + 1);
  expect_code(0, f, grpc::StatusCode::FAILED_PRECONDITION, "epoch");
  f = frame(0);
  AddSlice(&f, 1, 0, kPromptA, true);
  expect_code(0, f, grpc::StatusCode::INVALID_ARGUMENT, "step_id 0");
  f.set_step_id(100000);
  expect_code(0, f, grpc::StatusCode::INVALID_ARGUMENT, "too far ahead");

  // Step 1: an id outside the vocabulary. Refused, reported, and the step id is used up.
  f = frame(1);
  AddSlice(&f, 1, 0, {2, 300}, true);
  expect_code(0, f, grpc::StatusCode::INVALID_ARGUMENT, "vocabulary");
  auto all = pipe.sink.WaitAll(epoch, 1, 2);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(all[0].stage(), 0);
  EXPECT_NE(all[0].error().find("stage 0 refused step 1"), std::string::npos) << all[0].error();
  // The step went on without slices; the last stage's empty answer comes after the error.
  EXPECT_TRUE(all[1].error().empty()) << all[1].error();
  EXPECT_EQ(all[1].results_size(), 0);
  f = frame(1);
  AddSlice(&f, 1, 0, kPromptA, true);
  expect_code(0, f, grpc::StatusCode::ALREADY_EXISTS, "already");

  // Step 2: fine.
  f = frame(2);
  AddSlice(&f, 1, 0, kPromptA, true);
  ASSERT_TRUE(pipe.Send(0, f).ok());
  auto r = pipe.sink.Wait(epoch, 2);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->results_size(), 1) << r->error();
  EXPECT_EQ(r->results(0).token(), want.tokens[0]);

  // Step 3: a position that does not follow what stage 0 holds, next to a good new sequence.
  f = frame(3);
  AddSlice(&f, 2, 0, kPromptB, true);
  AddSlice(&f, 1, 3, {want.tokens[0]}, true);
  ASSERT_TRUE(pipe.Send(0, f).ok());  // only the compute thread knows the positions
  r = pipe.sink.Wait(epoch, 3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r->stage(), 0);
  EXPECT_NE(r->error().find("holds 9 tokens"), std::string::npos) << r->error();
  all = pipe.sink.WaitAll(epoch, 3, 2);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_FALSE(all[0].error().empty());
  EXPECT_TRUE(all[1].error().empty());
  EXPECT_EQ(all[1].results_size(), 0);

  // Step 4: a sequence nobody holds, not starting at 0.
  f = frame(4);
  AddSlice(&f, 7, 5, {3}, true);
  ASSERT_TRUE(pipe.Send(0, f).ok());
  r = pipe.sink.Wait(epoch, 4);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r->error().find("holds no sequence 7"), std::string::npos) << r->error();

  // Step 5: sequence 1 is untouched by all that and continues exactly.
  f = frame(5);
  AddSlice(&f, 1, kPromptA.size(), {want.tokens[0]}, true);
  ASSERT_TRUE(pipe.Send(0, f).ok());
  r = pipe.sink.Wait(epoch, 5);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->results_size(), 1) << r->error();
  EXPECT_EQ(r->results(0).token(), want.tokens[1]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pipe.Status(i).sequences(), 1) << "stage " << i;

  // Steps 7 then 6: 7 waits for 6, and their results come in step order.
  f = frame(7);
  AddSlice(&f, 8, 0, kPromptB, true);
  ASSERT_TRUE(pipe.Send(0, f).ok());
  EXPECT_FALSE(pipe.sink.Wait(epoch, 7, absl::Milliseconds(300)).has_value());
  f = frame(6);
  AddSlice(&f, 9, 0, kPromptA, true);
  ASSERT_TRUE(pipe.Send(0, f).ok());
  ASSERT_TRUE(pipe.sink.Wait(epoch, 7).has_value());
  ASSERT_EQ(pipe.sink.Arrivals(epoch, 6).size(), 1u);
  EXPECT_LT(pipe.sink.Arrivals(epoch, 6)[0], pipe.sink.Arrivals(epoch, 7)[0]);
  EXPECT_EQ(pipe.sink.Wait(epoch, 6)->results(0).token(), want.tokens[0]);

  // Step 8 straight into stage 1 with a hidden block of the wrong size, then of an unknown dtype.
  const int64_t H = engine->config().hidden_size;
  f = frame(8);
  AddSlice(&f, 10, 0, kPromptB, true);
  f.set_hidden_dtype(internal::v1::HIDDEN_F32);
  f.set_hidden(std::string((kPromptB.size() * H - 1) * 4, '\0'));
  expect_code(1, f, grpc::StatusCode::INVALID_ARGUMENT, "hidden holds");
  f.set_step_id(9);
  f.set_hidden_dtype(static_cast<internal::v1::HiddenDType>(5));
  f.set_hidden(std::string(kPromptB.size() * H * 4, '\0'));
  expect_code(1, f, grpc::StatusCode::INVALID_ARGUMENT, "hidden_dtype");
  // Stage 0's own step 8 then finds stage 1 has used that id: reported, blamed on stage 1. In all,
  // step 8 got stage 1's refusal, the last stage's empty answer after it, and the failed hand-off.
  f = frame(8);
  AddSlice(&f, 11, 0, kPromptB, true);
  ASSERT_TRUE(pipe.Send(0, f).ok());
  all = pipe.sink.WaitAll(epoch, 8, 3);
  ASSERT_EQ(all.size(), 3u);
  int refusal = -1, handoff = -1, empty = -1;
  for (int i = 0; i < 3; ++i) {
    if (all[i].error_code() == grpc::StatusCode::INVALID_ARGUMENT) refusal = i;
    if (all[i].error_code() == grpc::StatusCode::ALREADY_EXISTS) handoff = i;
    if (all[i].error().empty()) empty = i;
  }
  ASSERT_TRUE(refusal >= 0 && handoff >= 0 && empty >= 0);
  EXPECT_LT(refusal, empty);
  EXPECT_EQ(all[refusal].stage(), 1);
  EXPECT_NE(all[refusal].error().find("hidden holds"), std::string::npos) << all[refusal].error();
  EXPECT_EQ(all[handoff].stage(), 1);
  EXPECT_NE(all[handoff].error().find("could not pass step 8"), std::string::npos) << all[handoff].error();
  // Step 10 straight into stage 1, well-formed (bf16 zeros): stage 1 and 2 still serve.
  f = frame(10);
  AddSlice(&f, 12, 0, kPromptB, true);
  f.set_hidden_dtype(internal::v1::HIDDEN_BF16);
  f.set_hidden(std::string(kPromptB.size() * H * 2, '\0'));
  ASSERT_TRUE(pipe.Send(1, f).ok());
  r = pipe.sink.Wait(epoch, 10);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->error().empty()) << r->error();
  EXPECT_EQ(r->results_size(), 1);
}

TEST_F(WorkerPipelineTest, AssignRefusesBadRequestsAndKeepsTheOldAssignment) {
  Pipeline pipe(1);
  internal::v1::AssignRequest good;
  good.set_model_dir(dir());
  good.set_layer_begin(0);
  good.set_layer_end(5);
  good.set_first(true);
  good.set_last(true);
  good.set_coordinator_address(pipe.sink_address);
  good.set_epoch(3);
  good.set_precision("fp32");
  ASSERT_TRUE(pipe.AssignStage(0, good).ok());

  auto code = [&](const std::function<void(internal::v1::AssignRequest&)>& edit) {
    internal::v1::AssignRequest r = good;
    r.set_epoch(4);
    edit(r);
    return pipe.AssignStage(0, r).error_code();
  };
  EXPECT_EQ(code([&](auto& r) { r.set_model_dir(dir() + "/missing"); }), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(code([](auto& r) { r.set_model_dir(""); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_layer_end(6); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_layer_begin(3); r.set_layer_end(3); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_first(false); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_layer_end(4); }), grpc::StatusCode::INVALID_ARGUMENT);  // last but not at 5
  EXPECT_EQ(code([](auto& r) { r.set_precision("fp16"); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_coordinator_address(""); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_kv_budget_bytes(-1); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_last(false); r.set_layer_end(2); }), grpc::StatusCode::INVALID_ARGUMENT);

  const internal::v1::WorkerStatus s = pipe.Status(0);
  EXPECT_EQ(s.epoch(), 3u);
  EXPECT_EQ(s.layer_end(), 5);
  // The whole model on one worker still serves the old epoch.
  pipe.epoch = 3;
  internal::v1::StepFrame f;
  AddSlice(&f, 1, 0, kPromptB, true);
  const internal::v1::StepResult r = pipe.Run(f);
  EXPECT_TRUE(r.error().empty()) << r.error();
  EXPECT_EQ(r.results_size(), 1);
}

TEST_F(WorkerPipelineTest, AnUnreachableNextStageIsReportedAfterRetrying) {
  Pipeline pipe(1, absl::Milliseconds(300));
  internal::v1::AssignRequest r;
  r.set_model_dir(dir());
  r.set_layer_begin(0);
  r.set_layer_end(2);
  r.set_first(true);
  r.set_next_address("127.0.0.1:1");  // nothing listens there
  r.set_coordinator_address(pipe.sink_address);
  r.set_epoch(1);
  ASSERT_TRUE(pipe.AssignStage(0, r).ok());
  pipe.epoch = 1;
  internal::v1::StepFrame f;
  AddSlice(&f, 1, 0, kPromptB, false);
  const absl::Time start = absl::Now();
  const internal::v1::StepResult result = pipe.Run(f);
  EXPECT_EQ(result.error_code(), grpc::StatusCode::UNAVAILABLE) << result.error();
  EXPECT_EQ(result.stage(), 1);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));  // it retried
  EXPECT_EQ(pipe.Status(0).sequences(), 1);  // the step ran here; only the hand-off failed
}

TEST_F(WorkerPipelineTest, TheServerAnswersHealthChecks) {
  Pipeline pipe(1);
  auto channel = grpc::CreateChannel(pipe.worker(0).address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  // The standard health service is registered: an unknown service name gets NOT_FOUND, not
  // UNIMPLEMENTED.
  grpc::ClientContext ctx;
  const std::string request;  // HealthCheckRequest{service: ""} encodes to nothing
  grpc::ByteBuffer out;
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &in, &out, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = s;
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, std::chrono::seconds(5), [&] { return done; });
  ASSERT_TRUE(done);
  EXPECT_TRUE(status.ok()) << status.error_message();
  // HealthCheckResponse{status: SERVING = 1}: field 1, varint 1.
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(out.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

}  // namespace
}  // namespace layerpipe

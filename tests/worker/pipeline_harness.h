// In-process pipelines for worker tests: workers started on loopback, chained into a pipeline and fed
// StepFrames the way the coordinator does, with a fake coordinator collecting the StepResults; plus the
// single-process Engine's answers to compare them with.
#ifndef LAYERPIPE_TESTS_WORKER_PIPELINE_HARNESS_H_
#define LAYERPIPE_TESTS_WORKER_PIPELINE_HARNESS_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/sampling/sampler.h"
#include "grpcpp/grpcpp.h"
#include "proto/internal.grpc.pb.h"
#include "worker/worker_server.h"

namespace layerpipe {
namespace testing_pipeline {

using Ranges = std::vector<std::pair<int, int>>;
const Ranges kThreeStages = {{0, 2}, {2, 3}, {3, 5}};

// The coordinator's StepSink: keeps every StepResult in arrival order.
class FakeSink final : public internal::v1::StepSink::Service {
 public:
  grpc::Status StepDone(grpc::ServerContext*, const internal::v1::StepResult* r, internal::v1::StepAck*) override {
    std::lock_guard<std::mutex> lock(mu_);
    results_.push_back(*r);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  std::optional<internal::v1::StepResult> Wait(uint64_t epoch, uint64_t step, absl::Duration timeout = absl::Seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<internal::v1::StepResult> found;
    cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
      for (const internal::v1::StepResult& r : results_) {
        if (r.epoch() == epoch && r.step_id() == step) {
          found = r;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  // Once at least n have come: every result for (epoch, step), in arrival order.
  std::vector<internal::v1::StepResult> WaitAll(uint64_t epoch, uint64_t step, size_t n,
                                      absl::Duration timeout = absl::Seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<internal::v1::StepResult> found;
    cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
      found.clear();
      for (const internal::v1::StepResult& r : results_) {
        if (r.epoch() == epoch && r.step_id() == step) found.push_back(r);
      }
      return found.size() >= n;
    });
    return found;
  }

  // Indices in arrival order of the results for (epoch, step).
  std::vector<size_t> Arrivals(uint64_t epoch, uint64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<size_t> at;
    for (size_t i = 0; i < results_.size(); ++i) {
      if (results_[i].epoch() == epoch && results_[i].step_id() == step) at.push_back(i);
    }
    return at;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<internal::v1::StepResult> results_;
};

class Pipeline {
 public:
  // `customize` may adjust each worker's options (backend, host name, ...) before it starts.
  explicit Pipeline(int workers, absl::Duration retry_window = absl::Seconds(2),
                    const std::function<void(int, WorkerOptions&)>& customize = nullptr) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&sink);
    sink_server_ = b.BuildAndStart();
    sink_address = "127.0.0.1:" + std::to_string(port);
    for (int i = 0; i < workers; ++i) {
      WorkerOptions o;
      o.threads = 1;
      o.kv_budget_bytes = int64_t{1} << 30;
      o.outbox.retry_window = retry_window;
      if (customize) customize(i, o);
      auto w = WorkerServer::Start(o);
      EXPECT_TRUE(w.ok()) << w.status();
      stubs_.push_back(internal::v1::Worker::NewStub(grpc::CreateChannel((*w)->address(), grpc::InsecureChannelCredentials())));
      workers_.push_back(std::move(*w));
    }
  }
  ~Pipeline() {
    workers_.clear();
    sink_server_->Shutdown();
  }

  grpc::Status AssignStage(int i, internal::v1::AssignRequest r, internal::v1::AssignResponse* response = nullptr) {
    grpc::ClientContext ctx;
    internal::v1::AssignResponse ignored;
    return stubs_[i]->Assign(&ctx, r, response ? response : &ignored);
  }

  // A new epoch with stage i serving ranges[i].
  // With `secret`, the stages take only frames that carry it (AssignRequest.epoch_secret); Push adds it.
  void Assign(const std::string& dir, const Ranges& ranges, const std::string& precision, int64_t kv_budget = 0,
              const std::string& secret = "") {
    ++epoch;
    next_step = 1;
    epoch_secret = secret;
    const int layers = ranges.back().second;
    for (size_t i = 0; i < ranges.size(); ++i) {
      internal::v1::AssignRequest r;
      r.set_model_dir(dir);
      r.set_layer_begin(ranges[i].first);
      r.set_layer_end(ranges[i].second);
      r.set_first(i == 0);
      r.set_last(ranges[i].second == layers);
      if (i + 1 < ranges.size()) r.set_next_address(workers_[i + 1]->address());
      r.set_coordinator_address(sink_address);
      r.set_epoch(epoch);
      r.set_precision(precision);
      r.set_stage(static_cast<int>(i));
      r.set_kv_budget_bytes(kv_budget);
      r.set_epoch_secret(secret);
      internal::v1::AssignResponse response;
      const grpc::Status st = AssignStage(static_cast<int>(i), r, &response);
      EXPECT_TRUE(st.ok()) << st.error_message();
      EXPECT_GT(response.weight_bytes(), 0);
    }
  }

  grpc::Status Send(int stage, const internal::v1::StepFrame& frame) {
    grpc::ClientContext ctx;
    internal::v1::StepAck ack;
    return stubs_[stage]->Step(&ctx, frame, &ack);
  }

  // Sends the frame into stage 0 as the next step of the epoch; returns its step id.
  uint64_t Push(internal::v1::StepFrame frame) {
    frame.set_epoch(epoch);
    frame.set_epoch_secret(epoch_secret);
    frame.set_step_id(next_step++);
    const grpc::Status st = Send(0, frame);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return frame.step_id();
  }

  // Push, then the step's result.
  internal::v1::StepResult Run(internal::v1::StepFrame frame) {
    const uint64_t id = Push(std::move(frame));
    auto r = sink.Wait(epoch, id);
    EXPECT_TRUE(r.has_value()) << "no result for step " << id;
    return r.value_or(internal::v1::StepResult());
  }

  internal::v1::WorkerStatus Status(int stage) {
    grpc::ClientContext ctx;
    internal::v1::WorkerStatusRequest req;
    internal::v1::WorkerStatus s;
    EXPECT_TRUE(stubs_[stage]->Status(&ctx, req, &s).ok());
    return s;
  }

  // Waits until every stage holds no sequence (releases travel without a result).
  bool WaitUntilEmpty(absl::Duration timeout = absl::Seconds(5)) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      bool empty = true;
      for (size_t i = 0; i < workers_.size(); ++i) {
        const internal::v1::WorkerStatus s = Status(static_cast<int>(i));
        empty = empty && s.sequences() == 0 && s.kv_bytes_used() == 0;
      }
      if (empty) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  const WorkerServer& worker(int i) const { return *workers_[i]; }

  FakeSink sink;
  std::string sink_address;
  uint64_t epoch = 0;
  std::string epoch_secret;
  uint64_t next_step = 1;

 private:
  std::unique_ptr<grpc::Server> sink_server_;
  std::vector<std::unique_ptr<WorkerServer>> workers_;
  std::vector<std::unique_ptr<internal::v1::Worker::Stub>> stubs_;
};

inline internal::v1::StepSlice* AddSlice(internal::v1::StepFrame* f, uint64_t seq, int64_t pos0, const std::vector<int32_t>& ids,
                        bool sample) {
  internal::v1::StepSlice* s = f->add_slices();
  s->set_seq_id(seq);
  s->set_pos0(pos0);
  for (int32_t id : ids) s->add_ids(id);
  s->set_sample(sample);
  return s;
}

inline std::vector<double> LogSoftmax(const float* row, int64_t n) {
  double max = row[0];
  for (int64_t i = 1; i < n; ++i) max = std::max<double>(max, row[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - max);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = row[i] - max - std::log(sum);
  return out;
}

struct Generation {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
};

// What one process produces for `prompt`: the engine's logits and the same Sampler the worker uses.
inline Generation EngineGenerate(Engine& engine, const std::vector<int32_t>& prompt, int n, const SamplingParams& p) {
  const int64_t V = engine.config().vocab_size;
  auto kv = engine.NewSequence();
  Sampler sampler(p, static_cast<int>(V));
  std::vector<int32_t> history = prompt;
  Generation g;
  std::vector<int32_t> feed = prompt;
  for (int i = 0; i < n; ++i) {
    StepInput in{kv.get(), feed};
    auto logits = engine.Step({&in, 1});
    EXPECT_TRUE(logits.ok()) << logits.status();
    const std::vector<float>& row = (*logits)[0];
    const int32_t token = sampler.Sample(row, history);
    g.tokens.push_back(token);
    g.logprobs.push_back(LogSoftmax(row.data(), V)[token]);
    history.push_back(token);
    feed = {token};
  }
  return g;
}

// The sampling fields of a frame's slice.
inline void SetSampling(internal::v1::StepSlice* s, const SamplingParams& p) {
  s->mutable_sampling()->set_temperature(p.temperature);
  s->mutable_sampling()->set_top_k(p.top_k);
  s->mutable_sampling()->set_top_p(p.top_p);
  s->mutable_sampling()->set_min_p(p.min_p);
  s->mutable_sampling()->set_repetition_penalty(p.repetition_penalty);
  s->mutable_sampling()->set_seed(p.seed);
}

// Generates n tokens of `prompt` as sequence `seq` through the pipeline, one step per token, as the
// coordinator would; returns the ids.
inline std::vector<int32_t> PipelineGenerate(Pipeline& pipe, uint64_t seq, const std::vector<int32_t>& prompt, int n,
                                             const SamplingParams& p) {
  std::vector<int32_t> got;
  {
    internal::v1::StepFrame f;
    SetSampling(AddSlice(&f, seq, 0, prompt, true), p);
    const internal::v1::StepResult r = pipe.Run(f);
    EXPECT_EQ(r.results_size(), 1) << r.error();
    if (r.results_size() != 1) return got;
    got.push_back(r.results(0).token());
  }
  while (static_cast<int>(got.size()) < n) {
    internal::v1::StepFrame f;
    AddSlice(&f, seq, static_cast<int64_t>(prompt.size() + got.size() - 1), {got.back()}, true);
    const internal::v1::StepResult r = pipe.Run(f);
    EXPECT_EQ(r.results_size(), 1) << r.error();
    if (r.results_size() != 1) break;
    got.push_back(r.results(0).token());
  }
  return got;
}

inline std::unique_ptr<Engine> LoadEngine(const std::string& dir, Precision p) {
  EngineOptions o;
  o.precision = p;
  o.threads = 1;
  auto e = Engine::Load(dir, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

inline const std::vector<int32_t> kPromptA = {2, 17, 93, 5, 201, 44, 8, 150, 77};  // longer than the window of 6
inline const std::vector<int32_t> kPromptB = {2, 260, 31, 9};

// Two sequences decoded together through three stages; A's prompt arrives in two chunks.
inline void CheckGreedyAgainstEngine(Pipeline& pipe, Engine& engine, double logprob_tolerance) {
  constexpr int kTokens = 8;
  const SamplingParams greedy;
  const Generation want_a = EngineGenerate(engine, kPromptA, kTokens, greedy);
  const Generation want_b = EngineGenerate(engine, kPromptB, kTokens, greedy);

  std::vector<int32_t> got_a, got_b;
  {
    internal::v1::StepFrame f;
    AddSlice(&f, 1, 0, {kPromptA.begin(), kPromptA.begin() + 5}, false)->mutable_sampling();
    AddSlice(&f, 2, 0, kPromptB, true)->set_top_logprobs(3);
    const internal::v1::StepResult r = pipe.Run(f);
    ASSERT_TRUE(r.error().empty()) << r.error();
    ASSERT_EQ(r.results_size(), 1);  // only B sampled
    EXPECT_EQ(r.results(0).seq_id(), 2u);
    got_b.push_back(r.results(0).token());
    EXPECT_NEAR(r.results(0).logprob(), want_b.logprobs[0], logprob_tolerance);
    ASSERT_EQ(r.results(0).top_size(), 3);
    EXPECT_EQ(r.results(0).top(0).id(), r.results(0).token());  // greedy picks the most likely id
    EXPECT_FLOAT_EQ(r.results(0).top(0).logprob(), r.results(0).logprob());
    EXPECT_GE(r.results(0).top(0).logprob(), r.results(0).top(1).logprob());
    EXPECT_GE(r.results(0).top(1).logprob(), r.results(0).top(2).logprob());
  }
  {
    internal::v1::StepFrame f;
    AddSlice(&f, 1, 5, {kPromptA.begin() + 5, kPromptA.end()}, true);
    AddSlice(&f, 2, kPromptB.size(), {got_b.back()}, true);
    const internal::v1::StepResult r = pipe.Run(f);
    ASSERT_TRUE(r.error().empty()) << r.error();
    ASSERT_EQ(r.results_size(), 2);
    got_a.push_back(r.results(0).token());
    got_b.push_back(r.results(1).token());
    EXPECT_NEAR(r.results(0).logprob(), want_a.logprobs[0], logprob_tolerance);
  }
  while (got_a.size() < kTokens) {
    internal::v1::StepFrame f;
    AddSlice(&f, 2, kPromptB.size() + got_b.size() - 1, {got_b.back()}, got_b.size() < kTokens);
    AddSlice(&f, 1, kPromptA.size() + got_a.size() - 1, {got_a.back()}, true);
    const internal::v1::StepResult r = pipe.Run(f);
    ASSERT_TRUE(r.error().empty()) << r.error();
    for (const internal::v1::SliceResult& s : r.results()) {
      std::vector<int32_t>& got = s.seq_id() == 1 ? got_a : got_b;
      const Generation& want = s.seq_id() == 1 ? want_a : want_b;
      EXPECT_NEAR(s.logprob(), want.logprobs[got.size()], logprob_tolerance) << "seq " << s.seq_id();
      got.push_back(s.token());
    }
  }
  EXPECT_EQ(got_a, want_a.tokens);
  EXPECT_EQ(got_b, want_b.tokens);
}

}  // namespace testing_pipeline
}  // namespace layerpipe

#endif  // LAYERPIPE_TESTS_WORKER_PIPELINE_HARNESS_H_

// The device-link protocol between stages (PeerLinkHop on the sender, WorkerService::OpenPeerLink and
// linked frames on the receiver), run with a host-memory stand-in for the CUDA backend and its NCCL
// link: the worker code is the real one, only the backend and the link are fakes, so this runs in CI.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "tests/engine/test_util.h"
#include "tests/worker/pipeline_harness.h"

namespace layerpipe {
namespace {

using namespace testing_pipeline;  // NOLINT: the harness is this file's vocabulary

// "Device" rows that live in host memory.
class HostRows final : public DeviceRows {
 public:
  HostRows(std::vector<float> data, int64_t rows, int64_t width)
      : data_(std::move(data)), rows_(rows), width_(width) {}
  int64_t rows() const override { return rows_; }
  int64_t width() const override { return width_; }
  absl::Status CopyToHost(float* out) const override {
    std::memcpy(out, data_.data(), data_.size() * sizeof(float));
    return absl::OkStatus();
  }
  const std::vector<float>& data() const { return data_; }

 private:
  std::vector<float> data_;
  int64_t rows_, width_;
};

// Both ends of one link id: what was sent and not yet received, in order.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  int joined = 0;
  bool aborted = false;
  int waiting = 0;  // receives blocked for want of rows
  std::deque<std::shared_ptr<const DeviceRows>> in_flight;
  int64_t sent = 0, received = 0;
};

class Channels {
 public:
  static Channels& Get() {
    static Channels* c = new Channels();
    return *c;
  }
  std::shared_ptr<Channel> Of(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& c = by_id_[id];
    if (!c) c = std::make_shared<Channel>();
    return c;
  }
  // Rows sent and received over every link so far.
  std::pair<int64_t, int64_t> Totals() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t sent = 0, received = 0;
    for (auto& [id, c] : by_id_) {
      std::lock_guard<std::mutex> l(c->mu);
      sent += c->sent;
      received += c->received;
    }
    return {sent, received};
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Channel>> by_id_;
};

class FakeLink final : public PeerLink {
 public:
  // kind shows in transport(), so tests see which kind of link the stages agreed on. A receiver that
  // cannot map fails every receive, as CUDA IPC does between containers without a shared IPC namespace.
  FakeLink(std::shared_ptr<Channel> channel, int rank, PeerLinkKind kind, bool cannot_map = false)
      : c_(std::move(channel)), rank_(rank), kind_(kind), cannot_map_(cannot_map) {}
  absl::Status Send(std::shared_ptr<const DeviceRows> rows) override {
    if (rank_ != 0) return absl::FailedPreconditionError("only rank 0 sends");
    std::lock_guard<std::mutex> lock(c_->mu);
    c_->in_flight.push_back(std::move(rows));
    ++c_->sent;
    c_->cv.notify_all();
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<DeviceRows>> Receive(int64_t rows, int64_t width) override {
    if (rank_ != 1) return absl::FailedPreconditionError("only rank 1 receives");
    if (cannot_map_) {
      Abort();
      return absl::InternalError("cannot map the sender's slot");
    }
    std::unique_lock<std::mutex> lock(c_->mu);
    // The sender queues its rows before the frame leaves, so they are here (or about to be).
    ++c_->waiting;
    const bool woke =
        c_->cv.wait_for(lock, std::chrono::seconds(10), [&] { return c_->aborted || !c_->in_flight.empty(); });
    --c_->waiting;
    if (!woke) return absl::DeadlineExceededError("nothing arrived on the link");
    if (c_->aborted) return absl::UnavailableError("the link was aborted");
    auto got = std::move(c_->in_flight.front());
    c_->in_flight.pop_front();
    ++c_->received;
    // A real link moves bytes, not shapes: a mismatch is the receiver's bug, caught here.
    if (got->rows() != rows || got->width() != width) {
      return absl::InternalError(absl::StrCat("link carried [", got->rows(), ", ", got->width(),
                                              "] where the receiver expected [", rows, ", ", width, "]"));
    }
    const auto& host = static_cast<const HostRows&>(*got);
    return std::make_unique<HostRows>(host.data(), rows, width);
  }
  void Abort() override {
    std::lock_guard<std::mutex> lock(c_->mu);
    c_->aborted = true;
    c_->cv.notify_all();
  }
  std::string transport() const override {
    return kind_ == PeerLinkKind::kSameDevice ? "fake-same-device-link" : "fake-link";
  }

 private:
  std::shared_ptr<Channel> c_;
  int rank_;
  PeerLinkKind kind_;
  bool cannot_map_;
};

// The CPU executor dressed as a GPU backend: device rows in host memory, links through Channels.
class FakeGpuBackend final : public LayerBackend {
 public:
  FakeGpuBackend(const ModelWeights& w, Precision p, ThreadPool& pool, std::string uid)
      : cpu_(w, p, pool), uid_(std::move(uid)) {}

  std::string device() const override { return "fake-gpu:" + uid_; }
  std::unique_ptr<SequenceState> NewSequence() const override { return cpu_.NewSequence(); }
  absl::Status Forward(absl::Span<const SequenceSlice> slices, float* hidden) override {
    return cpu_.Forward(slices, hidden);
  }
  absl::Status Embed(absl::Span<const int32_t> ids, float* hidden) override { return cpu_.Embed(ids, hidden); }
  absl::Status Logits(const float* hidden, int64_t rows, float* logits) override {
    return cpu_.Logits(hidden, rows, logits);
  }
  const ModelWeights& weights() const override { return cpu_.weights(); }
  Precision precision() const override { return cpu_.precision(); }

  bool device_handoff() const override { return true; }
  // Its summaries are the host's, but it takes every sampler's summary path, as a GPU stage does.
  bool summarizes_on_device() const override { return true; }
  std::string device_uid() const override { return uid_; }
  absl::StatusOr<std::unique_ptr<DeviceRows>> ForwardToDevice(absl::Span<const SequenceSlice> slices,
                                                              const float* host_in,
                                                              std::unique_ptr<DeviceRows> device_in) override {
    int64_t rows = 0;
    for (const SequenceSlice& s : slices) rows += s.n;
    const int64_t H = weights().config().hidden_size;
    std::vector<float> h(static_cast<size_t>(rows * H));
    if (host_in != nullptr) {
      std::memcpy(h.data(), host_in, h.size() * sizeof(float));
    } else {
      auto* in = dynamic_cast<HostRows*>(device_in.get());
      if (in == nullptr || in->rows() != rows || in->width() != H) {
        return absl::InvalidArgumentError("device rows of the wrong kind or shape");
      }
      h = in->data();
      ++device_inputs_;
    }
    if (auto st = cpu_.Forward(slices, h.data()); !st.ok()) return st;
    return std::make_unique<HostRows>(std::move(h), rows, H);
  }
  absl::StatusOr<std::string> NewPeerLinkId() override {
    static std::atomic<int> next{0};
    return absl::StrCat("link-", uid_, "-", next++);
  }
  absl::StatusOr<std::unique_ptr<PeerLink>> JoinPeerLink(const std::string& id, int rank, PeerLinkKind kind,
                                                         const std::atomic<bool>* give_up) override {
    std::shared_ptr<Channel> c = Channels::Get().Of(id);
    std::unique_lock<std::mutex> lock(c->mu);
    ++c->joined;
    c->cv.notify_all();
    for (int waited_ms = 0; c->joined < 2; waited_ms += 10) {
      if (give_up != nullptr && give_up->load()) {
        ++gave_up_;
        return absl::CancelledError("gave up joining");
      }
      if (waited_ms > 10000) return absl::DeadlineExceededError("the peer never joined");
      c->cv.wait_for(lock, std::chrono::milliseconds(10));
    }
    // A uid starting "unmappable" names a GPU whose receives fail (FakeLink).
    return std::make_unique<FakeLink>(c, rank, kind, uid_.rfind("unmappable", 0) == 0);
  }

  static std::atomic<int64_t> device_inputs_;  // ForwardToDevice calls fed by device rows
  static std::atomic<int64_t> gave_up_;        // joins abandoned through give_up

 private:
  CpuBackend cpu_;
  std::string uid_;
};
std::atomic<int64_t> FakeGpuBackend::device_inputs_{0};
std::atomic<int64_t> FakeGpuBackend::gave_up_{0};

// Worker i runs on fake GPU uids[i] ("" = the plain CPU executor), on host `host`.
std::function<void(int, WorkerOptions&)> Devices(std::vector<std::string> uids, std::string host = "test-host") {
  return [uids, host](int i, WorkerOptions& o) {
    o.host_name = host;
    if (uids[i].empty()) return;
    const std::string uid = uids[i];
    o.make_backend = [uid](const ModelWeights& w, Precision p,
                           ThreadPool& pool) -> absl::StatusOr<std::unique_ptr<LayerBackend>> {
      return std::make_unique<FakeGpuBackend>(w, p, pool, uid);
    };
  };
}

class DeviceHandoffTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing_util::MakeCheckpoint("device_handoff", testing_util::SmallModel()));
  }
  static const std::string& dir() { return *dir_; }
  static std::string* dir_;
};
std::string* DeviceHandoffTest::dir_ = nullptr;

TEST_F(DeviceHandoffTest, ActivationsTakeTheLinkBetweenGpuStagesAndTokensEqualTheEngine) {
  Pipeline pipe(3, absl::Seconds(2), Devices({"gpu0", "gpu1", "gpu2"}));
  pipe.Assign(dir(), kThreeStages, "fp32");
  auto engine = LoadEngine(dir(), Precision::kFp32);
  const auto [sent0, received0] = Channels::Get().Totals();
  const int64_t device_inputs0 = FakeGpuBackend::device_inputs_;
  CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
  const auto [sent, received] = Channels::Get().Totals();
  // Two links, one transfer per step and link: 2 prompt steps + 7 decode steps.
  EXPECT_EQ(sent - sent0, 2 * 9);
  EXPECT_EQ(received - received0, sent - sent0);
  EXPECT_EQ(FakeGpuBackend::device_inputs_ - device_inputs0, 2 * 9) << "stages 1 and 2 ran from linked rows";
  EXPECT_EQ(pipe.Status(0).next_hop_transport(), "fake-link");
  EXPECT_EQ(pipe.Status(1).next_hop_transport(), "fake-link");
  EXPECT_EQ(pipe.Status(2).next_hop_transport(), "");
}

TEST_F(DeviceHandoffTest, GpuLastStagesSampleFromSummariesLikeTheEngine) {
  // Plain temperature (a whole-row draw) and top-p (a nucleus from the best entries and the total).
  Pipeline pipe(2, absl::Seconds(2), Devices({"gpu0", "gpu1"}));
  pipe.Assign(dir(), {{0, 3}, {3, 5}}, "fp32");
  auto engine = LoadEngine(dir(), Precision::kFp32);
  uint64_t seq = 40;
  for (const SamplingParams& p : {SamplingParams{.temperature = 1.1f, .min_p = 0.02f, .seed = 7},
                                  SamplingParams{.temperature = 0.8f, .top_p = 0.9f, .repetition_penalty = 1.2f,
                                                 .seed = 8}}) {
    SCOPED_TRACE(::testing::Message() << "top_p " << p.top_p);
    EXPECT_EQ(PipelineGenerate(pipe, ++seq, kPromptA, 10, p), EngineGenerate(*engine, kPromptA, 10, p).tokens);
  }
}

TEST_F(DeviceHandoffTest, StagesOnOneGpuLinkAsSameDeviceAndACpuNextStageKeepsActivationsInTheFrame) {
  const auto [sent0, received0] = Channels::Get().Totals();
  {
    // Stages 0 and 1 share a GPU on one host (a same-device link); stage 2 is a CPU worker.
    Pipeline pipe(3, absl::Seconds(2), Devices({"gpu0", "gpu0", ""}));
    pipe.Assign(dir(), kThreeStages, "bf16");
    auto engine = LoadEngine(dir(), Precision::kBf16);
    CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
    EXPECT_EQ(pipe.Status(0).next_hop_transport(), "fake-same-device-link");
    EXPECT_EQ(pipe.Status(1).next_hop_transport(), "grpc");
  }
  {
    // The same device id on two hosts is two devices.
    Pipeline pipe(2, absl::Seconds(2), [](int i, WorkerOptions& o) {
      Devices({"gpu0", "gpu0"}, i == 0 ? "host-a" : "host-b")(i, o);
    });
    pipe.Assign(dir(), {{0, 4}, {4, 5}}, "fp32");
    auto engine = LoadEngine(dir(), Precision::kFp32);
    CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
    EXPECT_EQ(pipe.Status(0).next_hop_transport(), "fake-link");
  }
  const auto [sent, received] = Channels::Get().Totals();
  EXPECT_EQ(sent - sent0, 2 * 9) << "one link in each pipeline";
  EXPECT_EQ(received - received0, 2 * 9);
}

TEST_F(DeviceHandoffTest, ALinkThatFailsBeforeItsFirstStepIsNotOfferedAgainAndTheFrameCarriesTheRows) {
  // Stage 1 cannot take rows off a link: the first epoch's step fails there; in the next epoch stage 1
  // declines stage 0's offer and the activations travel in the frame.
  Pipeline pipe(2, absl::Seconds(2), Devices({"gpu0", "unmappable-gpu1"}));
  pipe.Assign(dir(), {{0, 3}, {3, 5}}, "fp32");
  internal::v1::StepFrame f;
  AddSlice(&f, 1, 0, kPromptA, true);
  const internal::v1::StepResult failed = pipe.Run(f);
  EXPECT_NE(failed.error().find("cannot map the sender's slot"), std::string::npos) << failed.error();

  pipe.Assign(dir(), {{0, 3}, {3, 5}}, "fp32");
  auto engine = LoadEngine(dir(), Precision::kFp32);
  const auto [sent0, received0] = Channels::Get().Totals();
  CheckGreedyAgainstEngine(pipe, *engine, 1e-5);
  EXPECT_EQ(pipe.Status(0).next_hop_transport(), "grpc");
  EXPECT_EQ(Channels::Get().Totals().first, sent0) << "nothing more went over a link";
}

// The test plays stage 0 (layers [0,2) on a fake GPU "gpu0") for the single worker of `pipe`, assigned as
// stage 1, the last one, on "gpu1".
struct TestStageZero {
  TestStageZero(Pipeline& pipe, const std::string& dir, Precision precision)
      : pipe(pipe),
        dir(dir),
        config(*LoadModelConfig(dir)),
        weights(*ModelWeights::Load(dir, config, WeightSelection{0, 2, true, false})),
        backend(*weights, precision, pool, "gpu0"),
        stub(internal::v1::Worker::NewStub(grpc::CreateChannel(pipe.worker(0).address(), grpc::InsecureChannelCredentials()))) {
    request.set_model_dir(dir);
    request.set_layer_begin(2);
    request.set_layer_end(5);
    request.set_last(true);
    request.set_stage(1);
    request.set_precision(precision == Precision::kFp32 ? "fp32" : "bf16");
    request.set_coordinator_address(pipe.sink_address);
  }

  grpc::Status Assign(uint64_t epoch) {
    request.set_epoch(epoch);
    pipe.epoch = epoch;
    return pipe.AssignStage(0, request);
  }

  // Offers the worker a fresh link (id, in `link_id`) from another host's or GPU's stage 0.
  grpc::Status Offer(internal::v1::PeerLinkReply* reply) {
    if (link_id.empty()) link_id = *backend.NewPeerLinkId();
    internal::v1::PeerLinkRequest offer;
    offer.set_epoch(pipe.epoch);
    offer.set_from_stage(0);
    offer.set_link_id(link_id);
    offer.set_host("test-host");
    offer.set_device_uid("gpu0");
    grpc::ClientContext ctx;
    return stub->OpenPeerLink(&ctx, offer, reply);
  }

  Pipeline& pipe;
  std::string dir;
  ModelConfig config;
  ThreadPool pool{1};
  std::unique_ptr<ModelWeights> weights;
  FakeGpuBackend backend;
  std::unique_ptr<internal::v1::Worker::Stub> stub;
  internal::v1::AssignRequest request;
  std::string link_id;
};

TEST_F(DeviceHandoffTest, AReceiverTakesRowsOncePerStepEvenForRefusedAndResentFrames) {
  // The test is stage 0 of epoch 1; the worker is stage 1 (the last) on another GPU.
  Pipeline pipe(1, absl::Seconds(2), Devices({"gpu1"}));
  TestStageZero zero(pipe, dir(), Precision::kFp32);
  ASSERT_TRUE(zero.Assign(1).ok());
  auto& config = zero.config;
  auto& stage0 = zero.backend;
  internal::v1::PeerLinkReply reply;
  ASSERT_TRUE(zero.Offer(&reply).ok());
  EXPECT_TRUE(reply.accepted()) << reply.reason();
  EXPECT_EQ(zero.Offer(&reply).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  auto link = stage0.JoinPeerLink(zero.link_id, 0, PeerLinkKind::kAcrossDevices, nullptr);
  ASSERT_TRUE(link.ok()) << link.status();
  std::shared_ptr<Channel> channel = Channels::Get().Of(zero.link_id);

  auto kv = stage0.NewSequence();
  // Runs `ids` through stage 0 and queues the rows on the link; returns the linked frame.
  auto linked_frame = [&](uint64_t step, int64_t pos0, const std::vector<int32_t>& ids) {
    const int64_t H = config.hidden_size;
    std::vector<float> h(ids.size() * H);
    EXPECT_TRUE(stage0.Embed(ids, h.data()).ok());
    SequenceSlice s{kv.get(), static_cast<int64_t>(ids.size())};
    auto rows = stage0.ForwardToDevice({&s, 1}, h.data(), nullptr);
    EXPECT_TRUE(rows.ok());
    EXPECT_TRUE((*link)->Send(std::shared_ptr<const DeviceRows>(std::move(*rows))).ok());
    internal::v1::StepFrame f;
    f.set_epoch(1);
    f.set_step_id(step);
    f.set_hidden_dtype(internal::v1::HIDDEN_F32);
    f.set_hidden_on_link(true);
    AddSlice(&f, 1, pos0, ids, true);
    return f;
  };
  auto engine = LoadEngine(dir(), Precision::kFp32);
  const Generation want = EngineGenerate(*engine, kPromptA, 2, SamplingParams());

  // Step 1: the prompt. Resent (as after a lost ack): ALREADY_EXISTS, and nothing more is taken off the link.
  internal::v1::StepFrame f1 = linked_frame(1, 0, kPromptA);
  ASSERT_TRUE(pipe.Send(0, f1).ok());
  EXPECT_EQ(pipe.Send(0, f1).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  auto got = pipe.sink.Wait(1, 1);
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->results_size(), 1) << got->error();
  EXPECT_EQ(got->results(0).token(), want.tokens[0]);

  // Step 2: refused on arrival (sampling out of range); its rows still come off the link.
  {
    std::vector<int32_t> junk = {5};
    auto spare = stage0.NewSequence();
    std::vector<float> h(config.hidden_size);
    ASSERT_TRUE(stage0.Embed(junk, h.data()).ok());
    SequenceSlice s{spare.get(), 1};
    auto rows = stage0.ForwardToDevice({&s, 1}, h.data(), nullptr);
    ASSERT_TRUE(rows.ok());
    ASSERT_TRUE((*link)->Send(std::shared_ptr<const DeviceRows>(std::move(*rows))).ok());
    internal::v1::StepFrame f2;
    f2.set_epoch(1);
    f2.set_step_id(2);
    f2.set_hidden_on_link(true);
    AddSlice(&f2, 9, 0, junk, true)->mutable_sampling()->set_top_p(2.0f);
    EXPECT_EQ(pipe.Send(0, f2).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Step 3: the next token of sequence 1 reads its own rows, not step 2's.
  ASSERT_TRUE(pipe.Send(0, linked_frame(3, kPromptA.size(), {want.tokens[0]})).ok());
  got = pipe.sink.Wait(1, 3);
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->results_size(), 1) << got->error();
  EXPECT_EQ(got->results(0).token(), want.tokens[1]);
  std::lock_guard<std::mutex> lock(channel->mu);
  EXPECT_EQ(channel->sent, 3);
  EXPECT_EQ(channel->received, 3);
  EXPECT_TRUE(channel->in_flight.empty());
}

TEST_F(DeviceHandoffTest, ANewAssignmentAbortsALinkWaitingForRowsThatNeverCome) {
  Pipeline pipe(1, absl::Seconds(2), Devices({"gpu1"}));
  TestStageZero zero(pipe, dir(), Precision::kBf16);
  ASSERT_TRUE(zero.Assign(1).ok());
  // Stage 0 links, announces a step over the link, and dies before sending its rows.
  internal::v1::PeerLinkReply reply;
  ASSERT_TRUE(zero.Offer(&reply).ok());
  ASSERT_TRUE(reply.accepted()) << reply.reason();
  auto link = zero.backend.JoinPeerLink(zero.link_id, 0, PeerLinkKind::kAcrossDevices, nullptr);
  ASSERT_TRUE(link.ok());
  internal::v1::StepFrame f;
  f.set_epoch(1);
  f.set_step_id(1);
  f.set_hidden_on_link(true);
  AddSlice(&f, 1, 0, kPromptB, true);
  grpc::Status stuck;
  std::thread announce([&] { stuck = pipe.Send(0, f); });
  std::shared_ptr<Channel> channel = Channels::Get().Of(zero.link_id);
  for (absl::Time give_up = absl::Now() + absl::Seconds(10); absl::Now() < give_up;) {
    {
      std::lock_guard<std::mutex> lock(channel->mu);
      if (channel->waiting > 0) break;  // the worker's receive is waiting now
    }
    absl::SleepFor(absl::Milliseconds(5));
  }

  // The coordinator replaces the pipeline: the wait ends at once, not after the link's own timeout.
  const absl::Time start = absl::Now();
  ASSERT_TRUE(zero.Assign(2).ok());
  announce.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(stuck.error_code(), grpc::StatusCode::UNAVAILABLE) << stuck.error_message();
  EXPECT_NE(stuck.error_message().find("aborted"), std::string::npos) << stuck.error_message();
  EXPECT_EQ(pipe.Status(0).epoch(), 2u);
}

TEST_F(DeviceHandoffTest, ANewAssignmentEndsAJoinWhoseSenderNeverCame) {
  Pipeline pipe(1, absl::Seconds(2), Devices({"gpu1"}));
  TestStageZero zero(pipe, dir(), Precision::kBf16);
  ASSERT_TRUE(zero.Assign(1).ok());
  internal::v1::PeerLinkReply reply;
  ASSERT_TRUE(zero.Offer(&reply).ok());  // and stage 0 never joins
  ASSERT_TRUE(reply.accepted()) << reply.reason();
  const int64_t gave_up = FakeGpuBackend::gave_up_;
  ASSERT_TRUE(zero.Assign(2).ok());
  // The receiver's join thread lets go of the old stage (and its device memory) instead of waiting on.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (FakeGpuBackend::gave_up_ == gave_up && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(FakeGpuBackend::gave_up_, gave_up + 1);
}

TEST_F(DeviceHandoffTest, OffersForAnotherEpochOrStageAreRefusedAndTheSameGpuIsASameDeviceLink) {
  Pipeline pipe(2, absl::Seconds(2), Devices({"gpu0", "gpu1"}));
  pipe.Assign(dir(), {{0, 4}, {4, 5}}, "fp32");
  auto stub = internal::v1::Worker::NewStub(grpc::CreateChannel(pipe.worker(1).address(), grpc::InsecureChannelCredentials()));
  auto offer = [&](uint64_t epoch, int from, const std::string& host, const std::string& uid, internal::v1::PeerLinkReply* reply) {
    internal::v1::PeerLinkRequest r;
    r.set_epoch(epoch);
    r.set_from_stage(from);
    r.set_link_id("unused");
    r.set_host(host);
    r.set_device_uid(uid);
    grpc::ClientContext ctx;
    return stub->OpenPeerLink(&ctx, r, reply);
  };
  internal::v1::PeerLinkReply reply;
  EXPECT_EQ(offer(pipe.epoch + 1, 0, "elsewhere", "gpu9", &reply).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(offer(pipe.epoch, 1, "elsewhere", "gpu9", &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(offer(pipe.epoch, 0, "test-host", "gpu1", &reply).ok());
  EXPECT_TRUE(reply.accepted());
  EXPECT_TRUE(reply.same_device());
}

}  // namespace
}  // namespace layerpipe

#include "worker/stage.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "transport/hidden_codec.h"
#include "engine/model/kv_bytes.h"
#include "engine/backend/head_ops.h"
#include "engine/sampling/head.h"
#include "engine/sampling/logit_summary.h"
#include "engine/sampling/logprobs.h"

namespace layerpipe {

Stage::Stage(std::shared_ptr<const ModelWeights> weights, const StageOptions& options,
             std::unique_ptr<LayerBackend> backend)
    : weights_(std::move(weights)), options_(options), executor_(std::move(backend)),
      prefixes_(options.prefix_cache_bytes) {}

StageShape Stage::shape() const {
  const ModelConfig& c = weights_->config();
  StageShape shape{c.hidden_size, c.vocab_size, c.max_position_embeddings, options_.first};
  if (c.vision.present) {
    shape.vision_block = c.vision.model_patch_size;
    shape.image_id = c.mm_ids.image;
  }
  if (c.audio.present) {
    shape.audio_frame = c.audio.samples_per_token;
    shape.audio_id = c.mm_ids.audio;
  }
  return shape;
}

internal::v1::HiddenDType Stage::wire_dtype() const {
  // The engine keeps the residual stream in fp32 in both precisions; rounding it at a stage boundary
  // would make a split pipeline differ from one process. A token's hidden row is 15 KB at 12B, small
  // next to the weights a step streams, so exactness wins.
  return internal::v1::HIDDEN_F32;
}

int64_t Stage::SequenceLength(uint64_t seq_id) const {
  auto it = sequences_.find(seq_id);
  return it == sequences_.end() ? -1 : it->second->kv->length();
}

absl::Status Stage::PrepareSequences(const internal::v1::StepFrame& frame, std::vector<std::unique_ptr<Sequence>>* fresh,
                                     std::vector<Sequence*>* seqs) {
  for (const internal::v1::StepSlice& s : frame.slices()) {
    auto it = sequences_.find(s.seq_id());
    if (it == sequences_.end() && s.prefix_from() != 0) {
      const PrefixStore::Kept* prefix = prefixes_.Get(s.prefix_from());
      if (prefix == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("stage ", options_.stage, " keeps no prefix ", s.prefix_from(),
                                                          " for sequence ", s.seq_id()));
      }
      if (prefix->snapshot->length() != s.pos0()) {
        return absl::InvalidArgumentError(absl::StrCat("prefix ", s.prefix_from(), " holds ", prefix->snapshot->length(),
                                                       " tokens at stage ", options_.stage,
                                                       ", but the slice starts at pos0 ", s.pos0()));
      }
      auto kv = executor_->NewSequenceFrom(*prefix->snapshot);
      if (!kv.ok()) return kv.status();
      auto seq = std::make_unique<Sequence>();
      seq->kv = *std::move(kv);
      seq->history = prefix->history;
      // Counted as the sequence's own once the step ran (the pages it shares stay the prefix's).
      seq->shared_bytes = SharedBytes(s.pos0());
      seq->kv_bytes = seq->shared_bytes;
      seqs->push_back(seq.get());
      fresh->push_back(std::move(seq));
      continue;
    }
    if (it != sequences_.end() && s.prefix_from() != 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id(), " is already held at stage ",
                                                     options_.stage, "; only a new one starts from a prefix"));
    }
    if (it == sequences_.end()) {
      if (s.pos0() != 0) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", options_.stage, " holds no sequence ", s.seq_id(),
                                                       ", and a new sequence must start at pos0 0, not ", s.pos0()));
      }
      auto seq = std::make_unique<Sequence>();
      seq->kv = executor_->NewSequence();
      seqs->push_back(seq.get());
      fresh->push_back(std::move(seq));
      continue;
    }
    if (s.pos0() != it->second->kv->length()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id(), " holds ", it->second->kv->length(),
                                                     " tokens at stage ", options_.stage, ", but the slice starts at pos0 ",
                                                     s.pos0()));
    }
    seqs->push_back(it->second.get());
  }
  return absl::OkStatus();
}

int64_t Stage::SharedBytes(int64_t cut) const {
  return KvSharedBytesAtCut(weights_->config(), executor_->layer_begin(), executor_->layer_end(), options_.precision, cut);
}

absl::Status Stage::CheckKvBudget(const internal::v1::StepFrame& frame, const std::vector<Sequence*>& seqs) const {
  const ModelConfig& c = weights_->config();
  // The sequences' own bytes and the kept prefixes', each page counted once (Sequence::shared_bytes).
  int64_t after = kv_bytes_used_ + prefixes_.bytes();
  for (int i = 0; i < frame.slices_size(); ++i) {
    const internal::v1::StepSlice& s = frame.slices(i);
    const int64_t end = s.pos0() + s.ids_size();
    const int64_t bytes = KvBytesAtLength(c, executor_->layer_begin(), executor_->layer_end(), options_.precision, end);
    const int64_t shared = s.save_prefix() != 0 ? SharedBytes(end) : seqs[i]->shared_bytes;
    after += (bytes - shared) - (seqs[i]->kv_bytes - seqs[i]->shared_bytes);
    if (s.save_prefix() != 0) after += bytes;  // the snapshot's copies and the pages it now shares
  }
  if (after > options_.kv_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("stage ", options_.stage, ": the step needs ", after,
                                                     " bytes of KV cache, over the budget of ",
                                                     options_.kv_budget_bytes, " bytes (", kv_bytes_used_,
                                                     " in use by sequences, ", prefixes_.bytes(),
                                                     " by kept prefixes)"));
  }
  return absl::OkStatus();
}

void Stage::KeepPrefixes(const internal::v1::StepFrame& frame, const std::vector<Sequence*>& seqs) {
  for (int i = 0; i < frame.slices_size(); ++i) {
    const uint64_t key = frame.slices(i).save_prefix();
    if (key == 0) continue;
    Sequence& seq = *seqs[i];
    const int64_t cut = seq.kv->length();
    const int64_t evictions = prefixes_.evictions();
    if (!prefixes_.Put(key, seq.kv->Snapshot(), seq.history)) {
      LP_LOG(WARNING) << "stage " << options_.stage << " could not keep prefix " << key << " (" << cut
                      << " tokens): over its prefix budget of " << prefixes_.budget() << " bytes";
      continue;
    }
    if (prefixes_.evictions() != evictions) {
      LP_LOG(WARNING) << "stage " << options_.stage << " evicted kept prefixes of its own to keep prefix " << key
                      << ": the coordinator's count of its prefix budget disagrees";
    }
    const int64_t shared = SharedBytes(cut);
    kv_bytes_used_ -= shared - seq.shared_bytes;
    seq.shared_bytes = shared;
  }
}

absl::Status Stage::Run(const internal::v1::StepFrame& frame, StageInput input, internal::v1::StepFrame* forward,
                        internal::v1::StepResult* result, std::shared_ptr<const DeviceRows>* device_out) {
  std::vector<float>& hidden = input.hidden;
  const int64_t H = weights_->config().hidden_size;
  std::vector<std::unique_ptr<Sequence>> fresh;
  std::vector<Sequence*> seqs;
  if (auto st = PrepareSequences(frame, &fresh, &seqs); !st.ok()) return st;
  if (auto st = CheckKvBudget(frame, seqs); !st.ok()) return st;

  std::vector<SequenceSlice> slices;
  std::vector<int32_t> ids;
  std::vector<std::vector<PositionRange>> blocks(frame.slices_size());
  std::vector<SoftSpan> soft;
  std::vector<std::vector<float>> samples;  // audio frames, aligned copies of the wire bytes
  for (int i = 0; i < frame.slices_size(); ++i) {
    const internal::v1::StepSlice& s = frame.slices(i);
    for (const internal::v1::PositionSpan& b : s.image_blocks()) blocks[i].push_back({b.begin(), b.end()});
    const int64_t row0 = static_cast<int64_t>(ids.size());
    for (const internal::v1::SoftInput& in : s.soft_inputs()) {
      SoftSpan span;
      span.offset = row0 + in.offset();
      span.count = in.count();
      if (in.has_image()) {
        span.kind = SoftSpan::Kind::kImage;
        span.image = ImageView{in.image().height(), in.image().width(),
                               reinterpret_cast<const uint8_t*>(in.image().rgb().data())};
      } else {
        span.kind = SoftSpan::Kind::kAudio;
        std::vector<float>& f = samples.emplace_back(in.audio_samples().size() / sizeof(float));
        std::memcpy(f.data(), in.audio_samples().data(), f.size() * sizeof(float));
        span.samples = f.data();
      }
      soft.push_back(span);
    }
    // The last stage's head reads every row of a slice that scores or returns logits, the last of one
    // that samples, none of a prompt chunk (RunHead): the last layer computes only those.
    const int64_t outputs = !options_.last || s.score() || s.return_logits() ? -1 : (s.sample() ? 1 : 0);
    slices.push_back({seqs[i]->kv.get(), s.ids_size(), blocks[i], outputs});
    ids.insert(ids.end(), s.ids().begin(), s.ids().end());
  }
  const int64_t rows = static_cast<int64_t>(ids.size());
  if (options_.first) {
    hidden.assign(static_cast<size_t>(rows * H), 0.0f);
    if (auto st = executor_->EmbedInputs(ids, soft, hidden.data()); !st.ok()) return st;
  } else if (input.device != nullptr) {
    if (input.device->rows() != rows || input.device->width() != H) {
      return absl::InvalidArgumentError(absl::StrCat("the linked activations are [", input.device->rows(), ", ",
                                                     input.device->width(), "] but the slices need [", rows, ", ",
                                                     H, "]"));
    }
  } else if (static_cast<int64_t>(hidden.size()) != rows * H) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden holds ", hidden.size(), " values but the slices need ", rows * H));
  }
  // Activations stay in device memory when they came over a device link or go on over one; the last
  // stage still needs them on the host for the head.
  const bool leave_on_device = device_out != nullptr && !options_.last;
  std::shared_ptr<const DeviceRows> on_device;
  if (leave_on_device || input.device != nullptr) {
    auto out = executor_->ForwardToDevice(slices, input.device ? nullptr : hidden.data(), std::move(input.device));
    if (!out.ok()) return out.status();
    on_device = std::move(*out);
    if (!leave_on_device) {
      hidden.resize(static_cast<size_t>(rows * H));
      if (auto st = on_device->CopyToHost(hidden.data()); !st.ok()) return st;
      on_device.reset();
    }
  } else if (auto st = executor_->Forward(slices, hidden.data()); !st.ok()) {
    return st;
  }

  // The layers ran: the step's sequences are now part of the stage.
  for (int i = 0; i < frame.slices_size(); ++i) {
    Sequence* seq = seqs[i];
    const int64_t bytes = static_cast<int64_t>(seq->kv->bytes());
    kv_bytes_used_ += bytes - seq->kv_bytes;  // shared_bytes is unchanged here
    seq->kv_bytes = bytes;
    const int64_t sliding = static_cast<int64_t>(seq->kv->sliding_bytes());
    kv_sliding_bytes_used_ += sliding - seq->kv_sliding_bytes;
    seq->kv_sliding_bytes = sliding;
  }
  for (int i = 0, f = 0; i < frame.slices_size(); ++i) {
    if (f < static_cast<int>(fresh.size()) && fresh[f].get() == seqs[i]) {
      sequences_[frame.slices(i).seq_id()] = std::move(fresh[f++]);
    }
  }
  if (options_.last) {
    absl::Status head = RunHead(frame, seqs, hidden.data(), result);
    if (head.ok()) KeepPrefixes(frame, seqs);
    return head;
  }
  KeepPrefixes(frame, seqs);
  forward->set_epoch(frame.epoch());
  forward->set_step_id(frame.step_id());
  *forward->mutable_slices() = frame.slices();
  // The pixels and samples were embedded here; later stages need only the image blocks.
  for (internal::v1::StepSlice& s : *forward->mutable_slices()) s.clear_soft_inputs();
  *forward->mutable_release() = frame.release();
  *forward->mutable_drop_prefix() = frame.drop_prefix();
  forward->set_hidden_dtype(wire_dtype());
  if (on_device != nullptr) {
    *device_out = std::move(on_device);  // the next hop sends them (NextHop::SendRows)
  } else {
    EncodeHidden(hidden.data(), rows, H, wire_dtype(), forward->mutable_hidden());
  }
  return absl::OkStatus();
}

absl::Status Stage::RunHead(const internal::v1::StepFrame& frame, const std::vector<Sequence*>& seqs, const float* hidden,
                    internal::v1::StepResult* result) {
  const int64_t H = weights_->config().hidden_size, V = weights_->config().vocab_size;
  result->set_epoch(frame.epoch());
  result->set_step_id(frame.step_id());

  // Which rows need logits, and the result each slice fills. A slice that only picks a token goes
  // through the sampling head (engine/sampling/head.h: a summary where the sampler can work from one,
  // so on a GPU its logits never leave the device); one that scores or returns logits needs every row.
  struct RowUse {
    int slice;
    int64_t r;    // row within the slice
    int64_t row;  // row within the frame
  };
  std::vector<RowUse> uses;
  std::vector<SampleRow> to_sample;
  std::vector<int> sampled_slice;
  std::vector<internal::v1::SliceResult*> out(frame.slices_size(), nullptr);
  int64_t row0 = 0;
  for (int i = 0; i < frame.slices_size(); ++i) {
    const internal::v1::StepSlice& s = frame.slices(i);
    Sequence* seq = seqs[i];
    seq->history.insert(seq->history.end(), s.ids().begin(), s.ids().end());
    if (!seq->sampler && (s.has_sampling() || s.sample())) {
      seq->sampler = std::make_unique<Sampler>(ToSamplingParams(s.sampling()), static_cast<int>(V));
      seq->sampler->Discard(s.rng_skip());
    }
    const int64_t n = s.ids_size();
    const bool all_rows = s.score() || s.return_logits();
    if (s.sample() || all_rows) {
      out[i] = result->add_results();
      out[i]->set_seq_id(s.seq_id());
      if (!all_rows) {
        to_sample.push_back({seq->sampler.get(), seq->history, hidden + (row0 + n - 1) * H, s.top_logprobs()});
        sampled_slice.push_back(i);
      } else {
        for (int64_t r = 0; r < n; ++r) uses.push_back({i, r, row0 + r});
      }
    }
    row0 += n;
  }

  std::vector<SampledToken> sampled;
  if (auto st = SampleRows(HeadOpsOf(*executor_), H, V, to_sample, kHeadRowsPerCall, &sampled); !st.ok()) return st;
  for (size_t k = 0; k < sampled.size(); ++k) SetSampled(sampled[k], out[sampled_slice[k]]);

  std::vector<float> rows_in;
  for (size_t b = 0; b < uses.size(); b += kHeadRowsPerCall) {
    const int64_t m = std::min<int64_t>(kHeadRowsPerCall, static_cast<int64_t>(uses.size() - b));
    rows_in.resize(static_cast<size_t>(m * H));
    for (int64_t j = 0; j < m; ++j) std::copy_n(hidden + uses[b + j].row * H, H, rows_in.begin() + j * H);
    logits_.resize(static_cast<size_t>(m * V));
    if (auto st = executor_->Logits(rows_in.data(), m, logits_.data()); !st.ok()) return st;
    for (int64_t j = 0; j < m; ++j) {
      const RowUse& u = uses[b + j];
      const internal::v1::StepSlice& s = frame.slices(u.slice);
      internal::v1::SliceResult* res = out[u.slice];
      const absl::Span<const float> row(logits_.data() + j * V, static_cast<size_t>(V));
      const int64_t n = s.ids_size();
      const bool is_last_row = u.r == n - 1;
      if (s.return_logits()) res->mutable_logits()->Add(row.begin(), row.end());
      if (s.score()) {
        const double lse = LogSumExp(row);
        const int32_t next = is_last_row ? s.next_id() : s.ids(static_cast<int>(u.r + 1));
        if (next >= 0) res->add_score_logprobs(static_cast<float>(row[next] - lse));
      }
      if (s.sample() && is_last_row) {
        Sequence* seq = seqs[u.slice];
        SetSampled(SampleFromRow(*seq->sampler, row, seq->history, s.top_logprobs()), res);
      }
    }
  }

  return absl::OkStatus();
}

void Stage::SetSampled(const SampledToken& t, internal::v1::SliceResult* res) {
  res->set_token(t.token);
  res->set_logprob(t.logprob);
  for (const IdLogprob& top : t.top) {
    v1::TopLogprob* entry = res->add_top();
    entry->set_id(top.id);
    entry->set_logprob(top.logprob);
  }
}

void Stage::DropPrefixes(const google::protobuf::RepeatedField<uint64_t>& keys) {
  for (uint64_t key : keys) prefixes_.Drop(key);
}

void Stage::Release(const google::protobuf::RepeatedField<uint64_t>& seq_ids) {
  for (uint64_t id : seq_ids) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    kv_bytes_used_ -= it->second->kv_bytes - it->second->shared_bytes;
    kv_sliding_bytes_used_ -= it->second->kv_sliding_bytes;
    sequences_.erase(it);
  }
}

}  // namespace layerpipe

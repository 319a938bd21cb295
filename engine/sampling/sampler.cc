#include "engine/sampling/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/sampling/sample_weight.h"

namespace layerpipe {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Strict total order: higher logit first, lower id among equals. Being total, it makes the result
// of nth_element + sort unique, so every standard library keeps the same set in the same order.
struct Better {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    if (a.logit != b.logit) return a.logit > b.logit;
    return a.id < b.id;
  }
};

// Invalid fields fall back to "disabled" so that a request which skipped validation degrades to a
// defined behaviour instead of undefined arithmetic.
SamplingParams Sanitize(const SamplingParams& p) {
  SamplingParams s = p;
  if (!std::isfinite(s.temperature) || s.temperature < 0) s.temperature = 0;
  if (s.top_k < 0) s.top_k = 0;
  if (!(s.top_p > 0 && s.top_p <= 1)) s.top_p = 1;
  if (!(s.min_p >= 0 && s.min_p < 1)) s.min_p = 0;
  if (!(s.repetition_penalty > 0) || !std::isfinite(s.repetition_penalty)) s.repetition_penalty = 1;
  return s;
}

using sample_weight::ExpNonPositive;
using sample_weight::kLogBuckets;
using sample_weight::LogBucket;
using sample_weight::LogWeight;

// weights[i] (and buckets[i]) for a whole row; fixed-length inner loops over restrict pointers are
// what GCC's -O2 vectoriser accepts.
constexpr int kBlock = 16;

void RowWeights(const float* __restrict logits, int n, float max_logit, float inv_t,
                float* __restrict weights) {
  int i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) {
      weights[i + j] = ExpNonPositive(LogWeight(logits[i + j], max_logit, inv_t));
    }
  }
  for (; i < n; ++i) weights[i] = ExpNonPositive(LogWeight(logits[i], max_logit, inv_t));
}

void RowWeightsAndBuckets(const float* __restrict logits, int n, float max_logit, float inv_t,
                          float* __restrict weights, uint16_t* __restrict buckets) {
  int i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) {
      const float x = LogWeight(logits[i + j], max_logit, inv_t);
      weights[i + j] = ExpNonPositive(x);
      buckets[i + j] = LogBucket(x);
    }
  }
  for (; i < n; ++i) {
    const float x = LogWeight(logits[i], max_logit, inv_t);
    weights[i] = ExpNonPositive(x);
    buckets[i] = LogBucket(x);
  }
}

using BucketMassArray = std::array<double, kLogBuckets>;

// Top-p's mass per bucket over a whole row. Four interleaved histograms: neighbouring entries often
// share a bucket, and a single histogram would chain every add through the same memory slot. Any
// summation order gives the same masses: a bucket's weights lie within a factor e^(1/4) of each other,
// so every partial sum of them (24-bit floats of at most two binades, up to 2^28 of them) is exact
// in a double. SparseBucketMasses and the CUDA draw kernel's atomic histogram rely on that.
BucketMassArray BucketMasses(const float* weights, const uint16_t* buckets, int n) {
  std::array<BucketMassArray, 4> partial_mass{};
  int tail = 0;
  for (; tail + 4 <= n; tail += 4) {
    for (int j = 0; j < 4; ++j) partial_mass[j][buckets[tail + j]] += weights[tail + j];
  }
  for (; tail < n; ++tail) partial_mass[0][buckets[tail]] += weights[tail];
  BucketMassArray bucket_mass;
  for (int b = 0; b < kLogBuckets; ++b) {
    bucket_mass[b] = (partial_mass[0][b] + partial_mass[1][b]) + (partial_mass[2][b] + partial_mass[3][b]);
  }
  return bucket_mass;
}

// One entry of a row that a summary holds, with its top-p weight and bucket.
struct WeightedEntry {
  int32_t id;
  float logit;
  float weight;
  uint16_t bucket;
};

// The histogram some of a row's n entries (in id order) add to, in BucketMasses' order: a bucket whose
// entries are all among them gets BucketMasses' mass for it exactly.
BucketMassArray SparseBucketMasses(const std::vector<WeightedEntry>& by_id, int n) {
  std::array<BucketMassArray, 4> partial_mass{};
  const int whole_quads = n - n % 4;
  for (const WeightedEntry& e : by_id) partial_mass[e.id < whole_quads ? e.id % 4 : 0][e.bucket] += e.weight;
  BucketMassArray bucket_mass;
  for (int b = 0; b < kLogBuckets; ++b) {
    bucket_mass[b] = (partial_mass[0][b] + partial_mass[1][b]) + (partial_mass[2][b] + partial_mass[3][b]);
  }
  return bucket_mass;
}

// out[i] = in[i], with NaN replaced by -inf. Written for GCC's -O2 vectoriser, which only takes a
// fixed-length inner loop over restrict pointers with a quiet NaN test; this row pass is most of
// the cost of greedy decoding over a 262,144-entry vocabulary.
void CopyReplacingNaN(const float* __restrict in, float* __restrict out, int n) {
  int i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) {
      const float v = in[i + j];
      out[i + j] = std::isnan(v) ? kNegInf : v;
    }
  }
  for (; i < n; ++i) out[i] = std::isnan(in[i]) ? kNegInf : in[i];
}

// Sampler::PrepareLogits for a row and a summary request: NaN and banned ids to -inf, the penalty.
std::vector<float> PreparedRow(absl::Span<const float> row, const LogitRowRequest& request) {
  const int n = static_cast<int>(row.size());
  std::vector<float> prepared(static_cast<size_t>(n));
  CopyReplacingNaN(row.data(), prepared.data(), n);
  for (int32_t banned : kBannedTokenIds) {
    if (banned < n) prepared[banned] = kNegInf;
  }
  if (request.repetition_penalty != 1.0f) {
    for (int32_t id : request.penalized_ids) {
      if (id < 0 || id >= n) continue;
      float& v = prepared[id];
      v = v > 0 ? v / request.repetition_penalty : v * request.repetition_penalty;
    }
  }
  return prepared;
}

}  // namespace

int32_t DrawFromWholeRow(absl::Span<const float> row, const LogitRowRequest& request) {
  // Sampler::PrepareLogits, Filter's whole-vocabulary path without top-p, then Draw: the same steps on
  // the same functions, so a host summary's draw is Sample()'s token bit for bit.
  const int n = static_cast<int>(row.size());
  const std::vector<float> prepared = PreparedRow(row, request);
  float max_logit = kNegInf;
  for (float v : prepared) max_logit = std::max(max_logit, v);
  if (max_logit == kNegInf) return -1;
  std::vector<float> weights(static_cast<size_t>(n));
  RowWeights(prepared.data(), n, max_logit, 1.0f / request.temperature, weights.data());
  const double min_p = request.min_p;
  double mass = 0;
  for (float w : weights) {
    if (w > 0 && w >= min_p) mass += w;
  }
  const double point = request.u * mass;
  double cumulative = 0;
  int32_t last = -1;
  for (int i = 0; i < n; ++i) {
    const float w = weights[i];
    if (!(w > 0 && w >= min_p)) continue;
    cumulative += w;
    last = i;
    if (point < cumulative) return i;
  }
  return last;
}

double WholeRowTotalMass(absl::Span<const float> row, const LogitRowRequest& request) {
  const int n = static_cast<int>(row.size());
  const std::vector<float> prepared = PreparedRow(row, request);
  float max_logit = kNegInf;
  for (float v : prepared) max_logit = std::max(max_logit, v);
  if (max_logit == kNegInf) return 0;
  std::vector<float> weights(static_cast<size_t>(n));
  std::vector<uint16_t> buckets(static_cast<size_t>(n));
  RowWeightsAndBuckets(prepared.data(), n, max_logit, 1.0f / request.temperature, weights.data(), buckets.data());
  const BucketMassArray bucket_mass = BucketMasses(weights.data(), buckets.data(), n);
  double total = 0;
  for (int b = 0; b < kLogBuckets; ++b) total += bucket_mass[b];
  return total;
}

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (std::isnan(p.temperature) || std::isinf(p.temperature) || p.temperature < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "temperature must be a finite number >= 0 (0 = greedy), got %g", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_k must be >= 0 (0 = disabled), got %d", p.top_k));
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_p must be in (0, 1] (1 = disabled), got %g", p.top_p));
  }
  if (!(p.min_p >= 0 && p.min_p < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("min_p must be in [0, 1) (0 = disabled), got %g", p.min_p));
  }
  if (!(p.repetition_penalty > 0) || std::isinf(p.repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("repetition_penalty must be a finite number > 0 (1 = disabled), got %g",
                        p.repetition_penalty));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params, int vocab_size)
    : params_(Sanitize(params)), vocab_size_(std::max(vocab_size, 0)), rng_(params.seed) {}

double Sampler::PeekUniform() const {
  std::mt19937_64 copy = rng_;
  return static_cast<double>(copy() >> 11) * 0x1.0p-53;
}

double Sampler::NextUniform() {
  // The top 53 bits scaled by 2^-53: exactly representable, in [0, 1), and defined by mt19937_64
  // alone (std::uniform_real_distribution is implementation-specific).
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::Discard(int64_t draws) {
  if (draws > 0) rng_.discard(static_cast<unsigned long long>(draws));
}

void Sampler::PrepareLogits(absl::Span<const float> logits, absl::Span<const int32_t> history,
                            int n) {
  work_.resize(n);
  CopyReplacingNaN(logits.data(), work_.data(), n);
  for (int32_t banned : kBannedTokenIds) {
    if (banned < n) work_[banned] = kNegInf;
  }

  const float penalty = params_.repetition_penalty;
  if (penalty == 1.0f || history.empty()) return;
  // Each distinct id is penalised once, however often it repeats (HF gathers/scatters by id).
  penalized_.resize(n, 0);
  for (int32_t id : history) {
    if (id < 0 || id >= n || penalized_[id]) continue;
    penalized_[id] = 1;
    float& v = work_[id];
    v = v > 0 ? v / penalty : v * penalty;
  }
  for (int32_t id : history) {
    if (id >= 0 && id < n) penalized_[id] = 0;
  }
}

int32_t Sampler::Greedy(int n) const {
  const float best = MaxLogit(n);
  if (best == kNegInf) return -1;
  // The first occurrence: ties go to the lowest id.
  return static_cast<int32_t>(std::find(work_.begin(), work_.begin() + n, best) - work_.begin());
}

float Sampler::MaxLogit(int n) const {
  // Independent lanes break the loop-carried dependency so the compiler can use vector max
  // instructions; work_ holds no NaN, so the order of comparisons cannot change the result.
  constexpr int kLanes = 16;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, kNegInf);
  const float* data = work_.data();
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] = lane[j] > data[i + j] ? lane[j] : data[i + j];
  }
  float best = kNegInf;
  for (; i < n; ++i) best = std::max(best, data[i]);
  for (int j = 0; j < kLanes; ++j) best = std::max(best, lane[j]);
  return best;
}

void Sampler::SelectTopK(int n, size_t k) {
  candidates_.clear();
  for (const ScoredId& e : BestEntries(work_.data(), nullptr, n, k, /*skip_neg_inf=*/true)) {
    candidates_.push_back({e.value, e.id, 0.0});
  }
}

size_t Sampler::FilterSortedTopK(float max_logit) {
  const float inv_t = 1.0f / params_.temperature;
  const double min_p = params_.min_p;
  // Top-p's target is a fraction of the mass after top-k, i.e. before min-p removes anything.
  double total = 0;
  for (Candidate& c : candidates_) {
    c.weight = ExpNonPositive(LogWeight(c.logit, max_logit, inv_t));
    total += c.weight;
  }
  // Min-p, like top-k, keeps a prefix of the sorted order, so cutting before top-p's walk gives
  // the same final set as cutting after it. erase_if keeps the order.
  std::erase_if(candidates_, [min_p](const Candidate& c) { return c.weight <= 0 || c.weight < min_p; });
  if (params_.top_p < 1.0f) {
    // Already sorted: keep the smallest prefix whose mass reaches top_p.
    const double target = static_cast<double>(params_.top_p) * total;
    double cumulative = 0;
    size_t keep = 0;
    while (keep < candidates_.size()) {
      cumulative += candidates_[keep++].weight;
      if (cumulative >= target) break;
    }
    candidates_.resize(keep);
  }
  return candidates_.size();
}

size_t Sampler::Filter(int n) {
  candidates_.clear();
  const float max_logit = MaxLogit(n);
  if (max_logit == kNegInf) return 0;
  // Weights are probabilities relative to the best candidate (whose weight is exactly 1), so min-p
  // is a plain threshold and nothing overflows even for tiny temperatures. +inf logits share the
  // mass.
  if (params_.top_k > 0 && params_.top_k < n) {
    SelectTopK(n, params_.top_k);
    return FilterSortedTopK(max_logit);
  }

  // Over the whole vocabulary.
  const float inv_t = 1.0f / params_.temperature;
  const bool use_top_p = params_.top_p < 1.0f;
  const double min_p = params_.min_p;
  double total = 0;
  row_weights_.resize(n);
  if (!use_top_p) {
    RowWeights(work_.data(), n, max_logit, inv_t, row_weights_.data());
    const float* logits = work_.data();
    const float* weights = row_weights_.data();
    for (int i = 0; i < n; ++i) {
      const float w = weights[i];
      if (w > 0 && w >= min_p) candidates_.push_back({logits[i], i, w});
    }
    return candidates_.size();
  }

  // Top-p: a histogram of the mass by log-weight locates the band where the nucleus ends. Bands
  // above it belong to the nucleus whole and only the boundary band is sorted, so even a flat
  // distribution never sorts more than a narrow slice of the vocabulary.
  row_buckets_.resize(n);
  RowWeightsAndBuckets(work_.data(), n, max_logit, inv_t, row_weights_.data(), row_buckets_.data());
  const float* weights = row_weights_.data();
  const uint16_t* buckets = row_buckets_.data();
  const BucketMassArray bucket_mass = BucketMasses(weights, buckets, n);
  for (int b = 0; b < kLogBuckets; ++b) total += bucket_mass[b];
  const double target = static_cast<double>(params_.top_p) * total;
  double mass_above = 0;
  int boundary = kLogBuckets - 1;
  for (int b = 0; b < kLogBuckets; ++b) {
    if (mass_above + bucket_mass[b] >= target) {
      boundary = b;
      break;
    }
    mass_above += bucket_mass[b];
  }
  // Min-p removes only the lowest weights, so applying it here, before the walk through the
  // boundary band, gives the same set as applying it after top-p; the walk starts from mass_above,
  // which still counts whatever min-p removed above the boundary.
  boundary_.clear();
  const float* logits = work_.data();
  for (int i = 0; i < n; ++i) {
    const float w = weights[i];
    if (buckets[i] > boundary || !(w > 0) || w < min_p) continue;
    (buckets[i] < boundary ? candidates_ : boundary_).push_back({logits[i], i, w});
  }
  AppendBoundaryBand(mass_above, target);
  return candidates_.size();
}

void Sampler::AppendBoundaryBand(double mass_above, double target) {
  std::sort(boundary_.begin(), boundary_.end(), Better());
  double cumulative = mass_above;
  for (const Candidate& c : boundary_) {
    candidates_.push_back(c);
    cumulative += c.weight;
    if (cumulative >= target) break;
  }
}

int32_t Sampler::SampleFromWork(int n) {
  // Drawn first so the RNG advances by one per sampled step whatever happens below.
  const double u = NextUniform();
  const size_t size = Filter(n);
  return size == 0 ? -1 : Draw(u, size);
}

int32_t Sampler::Draw(double u, size_t size) const {
  double mass = 0;
  for (size_t i = 0; i < size; ++i) mass += candidates_[i].weight;
  const double point = u * mass;
  double cumulative = 0;
  for (size_t i = 0; i < size; ++i) {
    cumulative += candidates_[i].weight;
    if (point < cumulative) return candidates_[i].id;
  }
  // Rounding left `point` at the very end (every candidate has a positive weight).
  return candidates_[size - 1].id;
}

bool Sampler::WholeRowDraw() const {
  return params_.temperature > 0 && (params_.top_k <= 0 || params_.top_k >= vocab_size_) && params_.top_p >= 1.0f;
}

bool Sampler::Nucleus() const {
  return params_.temperature > 0 && (params_.top_k <= 0 || params_.top_k >= vocab_size_) && params_.top_p < 1.0f;
}

bool Sampler::UsesSummary(bool on_device) const {
  return BestNeeded(kMaxSummaryBest) > 0 || (on_device && (WholeRowDraw() || Nucleus()));
}

bool Sampler::FillRequest(absl::Span<const int32_t> history, LogitRowRequest* request,
                          std::vector<int32_t>* penalized, bool on_device) {
  if (!UsesSummary(on_device)) return false;
  *penalized = PenalizedIds(history);
  request->best = BestNeeded(kMaxSummaryBest);
  request->repetition_penalty = params_.repetition_penalty;
  request->penalized_ids = *penalized;
  request->draw = WholeRowDraw();
  request->total_mass = Nucleus();
  request->temperature = params_.temperature;
  request->min_p = params_.min_p;
  if (request->draw) request->u = PeekUniform();
  if (request->total_mass) request->best = std::min(kMaxSummaryBest, vocab_size_);
  return true;
}

int Sampler::BestNeeded(int max_best) const {
  if (params_.temperature == 0) return 1;
  if (params_.top_k > 0 && params_.top_k < vocab_size_ && params_.top_k <= max_best) return params_.top_k;
  return 0;
}

std::vector<int32_t> Sampler::PenalizedIds(absl::Span<const int32_t> history) {
  std::vector<int32_t> ids;
  if (params_.repetition_penalty == 1.0f) return ids;
  penalized_.resize(vocab_size_, 0);
  for (int32_t id : history) {
    if (id < 0 || id >= vocab_size_ || penalized_[id]) continue;
    penalized_[id] = 1;
    ids.push_back(id);
  }
  for (int32_t id : ids) penalized_[id] = 0;
  return ids;
}

bool Sampler::SampleFromSummary(const LogitRowSummary& summary, int32_t* token) {
  if (Nucleus()) return NucleusFromSummary(summary, token);
  int32_t id = -1;
  if (WholeRowDraw()) {
    NextUniform();  // the one FillRequest handed out, as SampleFromWork draws it
    id = summary.drawn;
  } else if (params_.temperature == 0) {
    if (!summary.best.empty()) id = summary.best.front().id;
  } else {
    // Drawn first, as in SampleFromWork, so the stream advances by one whatever the summary holds.
    const double u = NextUniform();
    candidates_.clear();
    for (const ScoredId& s : summary.best) candidates_.push_back({s.value, s.id, 0.0});
    if (!candidates_.empty()) {
      const size_t size = FilterSortedTopK(candidates_.front().logit);
      if (size > 0) id = Draw(u, size);
    }
  }
  *token = id >= 0 ? id : summary.fallback_id;
  return true;
}

bool Sampler::NucleusFromSummary(const LogitRowSummary& summary, int32_t* token) {
  // Filter's top-p path, replayed on the summary's entries: the histogram of the buckets they fill
  // completely is the whole row's, summed in the same order, and the total comes with the summary.
  if (summary.best.empty()) {
    NextUniform();
    *token = summary.fallback_id;
    return true;
  }
  const int n = vocab_size_;
  const float max_logit = summary.best.front().value;
  const float inv_t = 1.0f / params_.temperature;
  std::vector<WeightedEntry> by_id;
  by_id.reserve(summary.best.size());
  for (const ScoredId& e : summary.best) {
    const float x = LogWeight(e.value, max_logit, inv_t);
    by_id.push_back({e.id, e.value, ExpNonPositive(x), LogBucket(x)});
  }
  // Entries below the last one may be missing, so its bucket and those after it are incomplete, unless
  // the summary holds every entry above -inf (fewer than asked for).
  const int first_incomplete =
      summary.best.size() < static_cast<size_t>(std::min(kMaxSummaryBest, n)) ? kLogBuckets : by_id.back().bucket;
  std::sort(by_id.begin(), by_id.end(), [](const WeightedEntry& a, const WeightedEntry& b) { return a.id < b.id; });
  const BucketMassArray bucket_mass = SparseBucketMasses(by_id, n);
  const double target = static_cast<double>(params_.top_p) * summary.total_mass;
  double mass_above = 0;
  int boundary = kLogBuckets - 1;
  for (int b = 0; b < kLogBuckets; ++b) {
    if (b >= first_incomplete) return false;  // the nucleus ends among entries the summary lacks
    if (mass_above + bucket_mass[b] >= target) {
      boundary = b;
      break;
    }
    mass_above += bucket_mass[b];
  }
  const double u = NextUniform();
  const double min_p = params_.min_p;
  candidates_.clear();
  boundary_.clear();
  for (const WeightedEntry& e : by_id) {
    if (e.bucket > boundary || !(e.weight > 0) || e.weight < min_p) continue;
    (e.bucket < boundary ? candidates_ : boundary_).push_back({e.logit, e.id, e.weight});
  }
  AppendBoundaryBand(mass_above, target);
  *token = candidates_.empty() ? summary.best.front().id : Draw(u, candidates_.size());
  return true;
}

int32_t Sampler::Sample(absl::Span<const float> logits, absl::Span<const int32_t> history) {
  const int n = static_cast<int>(std::min<size_t>(logits.size(), static_cast<size_t>(vocab_size_)));
  if (n == 0) return 0;
  PrepareLogits(logits, history, n);
  const int32_t id = params_.temperature == 0 ? Greedy(n) : SampleFromWork(n);
  return id >= 0 ? id : RawFallbackId(logits.first(n));
}

std::vector<TokenProbability> Sampler::Distribution(absl::Span<const float> logits,
                                                    absl::Span<const int32_t> history) {
  const int n = static_cast<int>(std::min<size_t>(logits.size(), static_cast<size_t>(vocab_size_)));
  if (n == 0) return {{0, 1.0}};
  PrepareLogits(logits, history, n);
  if (params_.temperature == 0) {
    const int32_t id = Greedy(n);
    return {{id >= 0 ? id : RawFallbackId(logits.first(n)), 1.0}};
  }
  const size_t size = Filter(n);
  if (size == 0) return {{RawFallbackId(logits.first(n)), 1.0}};
  std::sort(candidates_.begin(), candidates_.end(), Better());
  double mass = 0;
  for (const Candidate& c : candidates_) mass += c.weight;
  std::vector<TokenProbability> out;
  out.reserve(size);
  for (const Candidate& c : candidates_) out.push_back({c.id, c.weight / mass});
  return out;
}

}  // namespace layerpipe

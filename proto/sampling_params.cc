#include "proto/sampling_params.h"

namespace layerpipe {

SamplingParams ToSamplingParams(const v1::SamplingParams& p) {
  SamplingParams s;
  if (p.has_temperature()) s.temperature = p.temperature();
  if (p.has_top_k()) s.top_k = p.top_k();
  if (p.has_top_p()) s.top_p = p.top_p();
  if (p.has_min_p()) s.min_p = p.min_p();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  if (p.has_seed()) s.seed = p.seed();
  return s;
}

}  // namespace layerpipe

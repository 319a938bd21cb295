// The API's SamplingParams (unset fields mean "the default") as the sampler's: the one converter, used
// where a request enters the coordinator and where the last stage builds a sequence's sampler.
#ifndef LAYERPIPE_PROTO_SAMPLING_PARAMS_H_
#define LAYERPIPE_PROTO_SAMPLING_PARAMS_H_

#include "engine/sampling/sampler.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe {

SamplingParams ToSamplingParams(const v1::SamplingParams& p);

}  // namespace layerpipe

#endif  // LAYERPIPE_PROTO_SAMPLING_PARAMS_H_

// What a sequence's KV caches will take, computed ahead of running a step so the KV budget can refuse
// the step before any memory is allocated.
#ifndef LAYERPIPE_WORKER_KV_BYTES_H_
#define LAYERPIPE_WORKER_KV_BYTES_H_

#include <cstdint>

#include "engine/config.h"
#include "engine/precision.h"

namespace layerpipe {

// SequenceKv::bytes() of a sequence of layers [layer_begin, layer_end) once it holds `length` tokens:
// a sliding layer allocates its whole window ring on the first token, a full layer one page of
// LayerKvCache::kPageTokens positions at a time.
int64_t KvBytesAtLength(const ModelConfig& config, int layer_begin, int layer_end, Precision precision,
                        int64_t length);

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_KV_BYTES_H_

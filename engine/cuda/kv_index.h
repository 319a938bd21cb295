// Index math shared by the host planner and the device kernels: where a position's K/V row lives in a
// sliding ring or in the full-attention pages (the same layout as the CPU's LayerKvCache), which rows
// of a chunk a ring keeps, and how a block's key range is cut into split-K pieces.
#ifndef LAYERPIPE_ENGINE_CUDA_KV_INDEX_H_
#define LAYERPIPE_ENGINE_CUDA_KV_INDEX_H_

#include <cstdint>

#ifdef __CUDACC__
#define LP_HOST_DEVICE __host__ __device__
#else
#define LP_HOST_DEVICE
#endif

namespace layerpipe::cuda {

// Positions per page of a full layer's cache (LayerKvCache::kPageTokens; checked in device_kv.cc).
constexpr int64_t kPageTokens = 256;

struct KvSlot {
  int64_t block;  // page index; always 0 in a ring
  int64_t slot;   // row inside the block
};

LP_HOST_DEVICE inline KvSlot KvSlotOf(int64_t pos, bool ring, int64_t window) {
  if (ring) return KvSlot{0, pos % window};
  return KvSlot{pos / kPageTokens, pos % kPageTokens};
}

// Element offset of K (which = 0) or V (which = 1) of `slot` inside a block of [rows][2][width].
LP_HOST_DEVICE inline int64_t KvRowOffset(int64_t slot, int which, int64_t width) { return (slot * 2 + which) * width; }

// Whether row i of an n-token chunk is written to the cache: a ring only keeps the last `window`.
LP_HOST_DEVICE inline bool CacheKeepsRow(int64_t i, int64_t n, bool ring, int64_t window) {
  return !ring || i >= n - window;
}

// First key a query at `pos` sees (window 0: full attention).
LP_HOST_DEVICE inline int64_t FirstVisibleKey(int64_t pos, int64_t window) {
  if (window <= 0) return 0;
  const int64_t lo = pos - window + 1;
  return lo > 0 ? lo : 0;
}

// Split `s` of `splits` over keys [lo, hi]: pieces are whole tiles of `tile` keys, so only the last
// non-empty piece is ragged; later pieces may be empty (*begin >= *end).
LP_HOST_DEVICE inline void SplitKeyRange(int64_t lo, int64_t hi, int splits, int s, int64_t tile, int64_t* begin,
                                         int64_t* end) {
  const int64_t len = hi - lo + 1;
  int64_t chunk = (len + splits - 1) / splits;
  chunk = (chunk + tile - 1) / tile * tile;
  const int64_t b = lo + chunk * s;
  const int64_t e = b + chunk;
  *begin = b;
  *end = e < hi + 1 ? e : hi + 1;
}

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_KV_INDEX_H_

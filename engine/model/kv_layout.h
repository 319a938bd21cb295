// The one KV layout (MODEL.md §2, "What this means for the KV cache"), shared by the CPU cache, the
// CUDA cache and its kernels, the worker's byte counts and the coordinator's admission: a sliding layer
// keeps a ring of `window` rows (older positions are never read again), a full layer pages of
// kPageTokens rows that grow with the context; a block holds all its K rows, then all its V rows,
// [kv_heads · head_dim] each: reading one kind of row walks memory in order, which the hardware
// prefetchers follow (with K and V rows side by side, a pass read every other KiB: the CPU attention
// of a decode step over a 32 K context took 7-15 % longer).
// A full layer whose K and V derive from one projection (k_eq_v) with one KV head keeps a position as
// one joined row instead (engine/model/joined_kv.h): width + joined values, K the first `width` of them,
// V the `width` from `joined` (joined = the rotated dims; 0: K and V rows apart). The values both read
// are kept once: 640 values a position on the 12B's global layers instead of 1024. (Its K and V passes
// each read most of every row; with the CPU attention's software prefetch, a global layer's decode
// attention at 32768 and 131072 context took 3-4 % less time than over rows apart: 2-core Intel VM.)
// Host and device code both include this header, so it uses nothing a kernel cannot.
#ifndef LAYERPIPE_ENGINE_MODEL_KV_LAYOUT_H_
#define LAYERPIPE_ENGINE_MODEL_KV_LAYOUT_H_

#include <cstdint>

#ifdef __CUDACC__
#define LP_HOST_DEVICE __host__ __device__
#else
#define LP_HOST_DEVICE
#endif

namespace layerpipe::kv {

// Positions per page of a full layer's cache.
constexpr int64_t kPageTokens = 256;

struct Slot {
  int64_t block;  // page index; always 0 in a ring
  int64_t slot;   // row inside the block
};

LP_HOST_DEVICE inline Slot SlotOf(int64_t pos, bool ring, int64_t window) {
  if (ring) return Slot{0, pos % window};
  return Slot{pos / kPageTokens, pos % kPageTokens};
}

// Rows in one block: the whole window for a ring, one page otherwise.
LP_HOST_DEVICE inline int64_t BlockRows(bool ring, int64_t window) { return ring ? window : kPageTokens; }

// Blocks a cache holds once positions < `length` are stored: a ring allocates its one block on the
// first token, a paged layer one page per kPageTokens positions.
LP_HOST_DEVICE inline int64_t BlocksAt(bool ring, int64_t length) {
  if (length <= 0) return 0;
  return ring ? 1 : (length + kPageTokens - 1) / kPageTokens;
}

// Element offset of K (which = 0) or V (which = 1) of `slot` inside a block of [K, V][rows][width], or
// of joined rows [rows][width + joined].
LP_HOST_DEVICE inline int64_t RowOffset(int64_t slot, int which, int64_t width, bool ring, int64_t window,
                                        int64_t joined) {
  if (joined > 0) return slot * (width + joined) + which * joined;
  return (which * BlockRows(ring, window) + slot) * width;
}

// Elements a position takes: a K and a V row, or one joined row.
LP_HOST_DEVICE inline int64_t PositionElements(int64_t width, int64_t joined) {
  return joined > 0 ? width + joined : 2 * width;
}

// Bytes of one block.
LP_HOST_DEVICE inline int64_t BlockBytes(bool ring, int64_t window, int64_t width, int64_t elem_bytes,
                                         int64_t joined) {
  return BlockRows(ring, window) * PositionElements(width, joined) * elem_bytes;
}

// Bytes one layer's cache takes at `length` positions.
LP_HOST_DEVICE inline int64_t LayerBytesAt(bool ring, int64_t window, int64_t width, int64_t elem_bytes,
                                           int64_t joined, int64_t length) {
  return BlocksAt(ring, length) * BlockBytes(ring, window, width, elem_bytes, joined);
}

// Whether row i of an n-token chunk is written to the cache: a ring only keeps the last `window`.
LP_HOST_DEVICE inline bool CacheKeepsRow(int64_t i, int64_t n, bool ring, int64_t window) {
  return !ring || i >= n - window;
}

}  // namespace layerpipe::kv

#endif  // LAYERPIPE_ENGINE_MODEL_KV_LAYOUT_H_

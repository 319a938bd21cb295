// Memory for the CPU KV cache's blocks (kv_cache.h), in transparent huge pages where the kernel allows.
// Attention reads a long context's rows from DRAM at every decode step, and in 4 KiB pages it walks a
// new TLB entry every 4 rows of a global layer (1 KiB each in bf16, before its rows were joined) and the
// hardware prefetchers stop at every page's end: a global layer's decode attention at 32768 context ran
// 1.03-1.20x faster (median 1.07, runs alternating with small pages, 2-core Zen 5 VM) with its pages in
// huge pages. A block of 2 MiB or more (a sliding layer's ring) is its own huge-page allocation; a smaller
// one (a global layer's 256-position page of joined rows: 320 KiB in bf16, 640 KiB in fp32) takes a slot
// of a 2 MiB chunk that holds blocks of its size only, since a huge page can only back a whole aligned
// 2 MiB (6 and 3 slots: 6 % of such a chunk unused).
#ifndef LAYERPIPE_ENGINE_CPU_KV_BLOCK_MEMORY_H_
#define LAYERPIPE_ENGINE_CPU_KV_BLOCK_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace layerpipe {

// `bytes` of memory (64-byte aligned, contents unspecified), given back when the last owner lets go;
// throws std::bad_alloc when out of memory. A block takes a free slot before a new chunk is made, and
// a chunk whose slots are all free is released unless it is the only one of its size with room, so the
// chunks held never exceed what the most blocks live at once needed, plus one a size.
std::shared_ptr<uint8_t[]> NewKvBlock(size_t bytes);

// The 2 MiB chunks held for blocks smaller than half of one, now.
size_t KvBlockChunks();

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_KV_BLOCK_MEMORY_H_

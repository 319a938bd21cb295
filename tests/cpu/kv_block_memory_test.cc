// KV blocks (engine/cpu/kv_block_memory.h): small ones share huge-page chunks without overlapping,
// freed slots are taken again before a chunk is made, empty chunks go back, large blocks are their own
// huge-page allocations.
#include "engine/cpu/kv_block_memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/huge_pages.h"

namespace layerpipe {
namespace {

uintptr_t Address(const std::shared_ptr<uint8_t[]>& block) { return reinterpret_cast<uintptr_t>(block.get()); }

// The VmFlags of the mapping that holds `address` ("" if none).
std::string VmFlagsAt(uintptr_t address) {
  auto holds = [=](uintptr_t lo, uintptr_t hi) { return address >= lo && address < hi; };
  for (const std::string& line : SmapsFields(holds)) {
    if (line.rfind("VmFlags:", 0) == 0) return line.substr(8);
  }
  return "";
}

TEST(KvBlockMemoryTest, SmallBlocksShareAHugePageChunkWithoutOverlapping) {
  const size_t chunks = KvBlockChunks();
  constexpr size_t kBytes = 512 << 10;  // a global layer's bf16 page
  std::vector<std::shared_ptr<uint8_t[]>> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(NewKvBlock(kBytes));
  EXPECT_EQ(KvBlockChunks(), chunks + 1);
  const uintptr_t chunk = Address(blocks[0]) / kHugePageBytes * kHugePageBytes;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Address(blocks[i]) % 64, 0u);
    EXPECT_EQ(Address(blocks[i]) / kHugePageBytes * kHugePageBytes, chunk) << "block " << i;
    std::memset(blocks[i].get(), 'a' + i, kBytes);
  }
  for (int i = 0; i < 4; ++i) {
    for (size_t at : {size_t{0}, kBytes / 2, kBytes - 1}) EXPECT_EQ(blocks[i][at], 'a' + i) << "block " << i;
  }
  // The chunk was advised to use huge pages (whether the kernel grants them depends on its THP mode).
  EXPECT_NE(VmFlagsAt(Address(blocks[0])).find(" hg"), std::string::npos) << VmFlagsAt(Address(blocks[0]));
  // A fifth block needs a second chunk.
  blocks.push_back(NewKvBlock(kBytes));
  EXPECT_EQ(KvBlockChunks(), chunks + 2);
}

TEST(KvBlockMemoryTest, FreedSlotsAreTakenAgainAndEmptyChunksGoBack) {
  const size_t chunks = KvBlockChunks();
  constexpr size_t kBytes = 300 << 10;  // 6 a chunk, 248 KiB of it unused
  std::vector<std::shared_ptr<uint8_t[]>> blocks;
  for (int i = 0; i < 18; ++i) blocks.push_back(NewKvBlock(kBytes));
  EXPECT_EQ(KvBlockChunks(), chunks + 3);
  const uintptr_t freed = Address(blocks[7]);
  blocks[7].reset();
  EXPECT_EQ(Address(blocks[7] = NewKvBlock(kBytes)), freed);  // the free slot, not a new chunk
  EXPECT_EQ(KvBlockChunks(), chunks + 3);
  blocks.clear();
  EXPECT_EQ(KvBlockChunks(), chunks + 1);  // one empty chunk kept for the next block of this size
  auto again = NewKvBlock(kBytes);
  EXPECT_EQ(KvBlockChunks(), chunks + 1);
}

TEST(KvBlockMemoryTest, SizesDoNotShareChunks) {
  auto a = NewKvBlock(64 << 10), b = NewKvBlock(96 << 10);
  EXPECT_NE(Address(a) / kHugePageBytes, Address(b) / kHugePageBytes);
  // Sizes are taken in whole cache lines: 100 and 128 bytes share slots of 128.
  auto c = NewKvBlock(100), d = NewKvBlock(128);
  EXPECT_EQ(Address(c) / kHugePageBytes, Address(d) / kHugePageBytes);
  EXPECT_EQ(Address(d) > Address(c) ? Address(d) - Address(c) : Address(c) - Address(d), 128u);
}

TEST(KvBlockMemoryTest, LargeBlocksAreTheirOwnHugePageAllocations) {
  const size_t chunks = KvBlockChunks();
  auto ring = NewKvBlock(size_t{8} << 20);  // a sliding layer's bf16 ring
  EXPECT_EQ(Address(ring) % kHugePageBytes, 0u);
  EXPECT_NE(VmFlagsAt(Address(ring)).find(" hg"), std::string::npos);
  auto between = NewKvBlock(size_t{3} << 19);  // 1.5 MiB: one a chunk would waste a quarter
  EXPECT_EQ(Address(between) % 64, 0u);
  EXPECT_EQ(KvBlockChunks(), chunks);
  std::memset(ring.get(), 1, size_t{8} << 20);
  std::memset(between.get(), 2, size_t{3} << 19);
}

// Stages of one worker take and free blocks from several threads at once: no block is handed out
// twice while held (each thread's pattern survives the others), and all chunks but one a size go back.
TEST(KvBlockMemoryTest, ThreadsTakingAndFreeingAtOnceNeverShareABlock) {
  const size_t chunks = KvBlockChunks();
  constexpr size_t kSizes[] = {64 << 10, 200 << 10};
  std::vector<std::thread> threads;
  std::atomic<int> clobbered{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &kSizes, &clobbered] {
      std::vector<std::shared_ptr<uint8_t[]>> held;
      for (int i = 0; i < 400; ++i) {
        const size_t bytes = kSizes[(i + t) % 2];
        held.push_back(NewKvBlock(bytes));
        std::memset(held.back().get(), t + 1, bytes);
        if (held.size() > 12) {  // let go of the oldest, after checking it kept this thread's mark
          const size_t old_bytes = kSizes[(i - 12 + t) % 2];
          if (held.front()[0] != t + 1 || held.front()[old_bytes - 1] != t + 1) ++clobbered;
          held.erase(held.begin());
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(clobbered.load(), 0);
  EXPECT_LE(KvBlockChunks(), chunks + 2);
}

}  // namespace
}  // namespace layerpipe

#include "engine/cpu/kv_block_memory.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <unordered_map>
#include <vector>

#include "engine/cpu/kernel_memory.h"
#include "engine/model/huge_pages.h"

namespace layerpipe {
namespace {

constexpr size_t kAlign = 64;

// One huge page cut into equal slots.
struct Chunk {
  std::unique_ptr<HugePageBuffer> memory;
  size_t stride;
  std::vector<int> free;  // slots not in use
  int slots() const { return static_cast<int>(kHugePageBytes / stride); }
};

class BlockPool {
 public:
  std::shared_ptr<uint8_t[]> Take(size_t stride) {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<Chunk*>& open = open_[stride];
    if (open.empty()) open.insert(NewChunk(stride));
    Chunk* chunk = *open.begin();
    const int slot = chunk->free.back();
    chunk->free.pop_back();
    if (chunk->free.empty()) open.erase(chunk);
    return std::shared_ptr<uint8_t[]>(chunk->memory->data() + static_cast<size_t>(slot) * stride,
                                      [this, chunk, slot](uint8_t*) { Give(chunk, slot); });
  }

  size_t chunks() {
    std::lock_guard<std::mutex> lock(mu_);
    return chunks_.size();
  }

 private:
  Chunk* NewChunk(size_t stride) {
    absl::StatusOr<std::unique_ptr<HugePageBuffer>> memory = HugePageBuffer::Allocate(kHugePageBytes);
    if (!memory.ok()) throw std::bad_alloc();
    auto chunk = std::make_unique<Chunk>();
    chunk->memory = *std::move(memory);
    chunk->stride = stride;
    for (int s = chunk->slots() - 1; s >= 0; --s) chunk->free.push_back(s);  // slot 0 first
    Chunk* raw = chunk.get();
    chunks_.emplace(raw, std::move(chunk));
    return raw;
  }

  void Give(Chunk* chunk, int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    chunk->free.push_back(slot);
    std::set<Chunk*>& open = open_[chunk->stride];
    open.insert(chunk);  // a no-op unless it was full
    // Emptied: released unless it is the only chunk of its size with room, so that a block freed and
    // taken again and again at a chunk's edge does not map and zero a huge page each time.
    if (static_cast<int>(chunk->free.size()) == chunk->slots() && open.size() > 1) {
      open.erase(chunk);
      chunks_.erase(chunk);
    }
  }

  std::mutex mu_;
  std::unordered_map<Chunk*, std::unique_ptr<Chunk>> chunks_;
  std::map<size_t, std::set<Chunk*>> open_;  // chunks with a free slot, by slot size
};

// Never destroyed: blocks may be let go during static destruction.
BlockPool& Pool() {
  static BlockPool* pool = new BlockPool;
  return *pool;
}

}  // namespace

std::shared_ptr<uint8_t[]> NewKvBlock(size_t bytes) {
  const size_t stride = (bytes + kAlign - 1) / kAlign * kAlign;
  if (stride != 0 && 2 * stride <= kHugePageBytes) return Pool().Take(stride);
  // Its own allocation: 2 MiB aligned and advised from 2 MiB up, 64-byte aligned below (where one slot a
  // chunk would waste more than it saves).
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(AllocateKernelMemory(bytes)),
                                    [](uint8_t* p) { std::free(p); });
}

size_t KvBlockChunks() { return Pool().chunks(); }

}  // namespace layerpipe

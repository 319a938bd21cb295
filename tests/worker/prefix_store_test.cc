// The stage's prefix store: a byte budget, least recently used evicted first, and snapshots that stay
// valid for the sequences started from them after they are evicted.
#include "worker/prefix_store.h"

#include <gtest/gtest.h>

#include <cstring>

#include "engine/engine.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

class FakeSnapshot final : public PrefixSnapshot {
 public:
  FakeSnapshot(int64_t length, size_t bytes) : length_(length), bytes_(bytes) {}
  int64_t length() const override { return length_; }
  size_t bytes() const override { return bytes_; }

 private:
  int64_t length_;
  size_t bytes_;
};

std::unique_ptr<PrefixSnapshot> Fake(int64_t length, size_t bytes) {
  return std::make_unique<FakeSnapshot>(length, bytes);
}

TEST(PrefixStore, EvictsTheLeastRecentlyUsedToStayInItsBudget) {
  PrefixStore store(100);
  EXPECT_TRUE(store.Put(1, Fake(10, 40)));
  EXPECT_TRUE(store.Put(2, Fake(20, 40)));
  ASSERT_NE(store.Get(1), nullptr);  // 1 is now the most recently used
  EXPECT_TRUE(store.Put(3, Fake(30, 40)));
  EXPECT_EQ(store.Get(2), nullptr) << "2 was the least recently used";
  ASSERT_NE(store.Get(1), nullptr);
  EXPECT_EQ(store.Get(1)->snapshot->length(), 10);
  EXPECT_EQ(store.Get(3)->snapshot->length(), 30);
  EXPECT_EQ(store.bytes(), 80);
  EXPECT_EQ(store.evictions(), 1);
  // Replacing a key frees what it held first.
  EXPECT_TRUE(store.Put(3, Fake(31, 60)));
  EXPECT_EQ(store.bytes(), 100);
  EXPECT_EQ(store.Get(3)->snapshot->length(), 31);
  EXPECT_EQ(store.size(), 2u);
}

TEST(PrefixStore, KeepsNothingOverItsBudgetOrWhenOff) {
  PrefixStore store(100);
  EXPECT_TRUE(store.Put(1, Fake(10, 50)));
  EXPECT_FALSE(store.Put(2, Fake(20, 101)));
  EXPECT_EQ(store.Get(2), nullptr);
  ASSERT_NE(store.Get(1), nullptr) << "a snapshot too big to keep evicts nothing";
  store.Clear();
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0);
  PrefixStore off(0);
  EXPECT_FALSE(off.Put(1, Fake(1, 1)));
  EXPECT_EQ(off.Get(1), nullptr);
}

// A sequence started from a snapshot goes on reading its shared pages after the store evicted it.
TEST(PrefixStore, ASequenceOutlivesTheEvictionOfItsSnapshot) {
  const std::string dir = testing_util::MakeCheckpoint("prefix_store", testing_util::SmallModel());
  EngineOptions o;
  o.precision = Precision::kFp32;
  auto e = Engine::Load(dir, o);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<int32_t> prefix(300), suffix = {5, 6, 7, 8};
  for (size_t i = 0; i < prefix.size(); ++i) prefix[i] = 3 + static_cast<int32_t>((i * 37) % 290);
  auto origin = (*e)->NewSequence();
  ASSERT_TRUE((*e)->Step({StepInput{origin.get(), prefix}}).ok());
  PrefixStore store(int64_t{1} << 30);
  ASSERT_TRUE(store.Put(7, origin->Snapshot()));
  origin.reset();
  auto fork = (*e)->NewSequenceFrom(*store.Get(7)->snapshot);
  ASSERT_TRUE(fork.ok());
  store.Clear();  // the snapshot and the origin are gone; the fork holds the pages it shares
  auto got = (*e)->Step({StepInput{fork->get(), suffix}});
  ASSERT_TRUE(got.ok());
  std::vector<int32_t> whole = prefix;
  whole.insert(whole.end(), suffix.begin(), suffix.end());
  auto fresh = (*e)->NewSequence();
  auto want = (*e)->Step({StepInput{fresh.get(), whole}});
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(std::memcmp((*got)[0].data(), (*want)[0].data(), (*want)[0].size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace layerpipe

#include "coordinator/jobs/bounded_cache.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

TEST(BoundedCacheTest, MemoryStaysWithinBothBoundsHoweverManyEntriesGoIn) {
  BoundedCache<std::string> cache(/*max_entries=*/100, /*max_bytes=*/10000);
  for (int i = 0; i < 100000; ++i) {
    const std::string key = absl::StrCat("job-", i);
    cache.Put(key, std::string(i % 250, 'x'), /*bytes=*/i % 250);
    ASSERT_LE(cache.entries(), 100);
    ASSERT_LE(cache.bytes(), 10000);
    // What was just put is there, whatever it evicted.
    ASSERT_TRUE(cache.Get(key).has_value() || i % 250 + static_cast<int>(key.size()) > 10000);
  }
  EXPECT_GT(cache.entries(), 0);
  EXPECT_FALSE(cache.Get("job-0").has_value());
}

TEST(BoundedCacheTest, EvictsTheLeastRecentlyUsed) {
  BoundedCache<int> cache(3, 1 << 20);
  cache.Put("a", 1, 0);
  cache.Put("b", 2, 0);
  cache.Put("c", 3, 0);
  ASSERT_EQ(cache.Get("a"), 1);  // a is now the most recent
  cache.Put("d", 4, 0);
  EXPECT_FALSE(cache.Get("b").has_value());
  EXPECT_EQ(cache.Get("a"), 1);
  EXPECT_EQ(cache.Get("c"), 3);
  EXPECT_EQ(cache.Get("d"), 4);
}

TEST(BoundedCacheTest, CountsBytesThroughReplaceEraseAndEraseIf) {
  BoundedCache<int> cache(10, 100);
  cache.Put("a", 1, 10);  // 11 with the key
  cache.Put("b", 2, 20);
  EXPECT_EQ(cache.bytes(), 32);
  cache.Put("a", 5, 30);  // replaced, not added
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.bytes(), 52);
  EXPECT_EQ(cache.Get("a"), 5);
  cache.Erase("b");
  cache.Erase("never");
  EXPECT_EQ(cache.bytes(), 31);
  cache.Put("c", 7, 0);
  cache.EraseIf([](int v) { return v > 6; });
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.bytes(), 31);
  // Larger than the whole budget: not kept, and the old value under the key is gone too.
  cache.Put("a", 9, 200);
  EXPECT_FALSE(cache.Get("a").has_value());
  EXPECT_EQ(cache.bytes(), 0);
}

}  // namespace
}  // namespace layerpipe

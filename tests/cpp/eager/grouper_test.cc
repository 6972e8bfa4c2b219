// Content-defined grouping: boundaries depend on the ops, not on where the
// stream started; lengths stay within the bounds.
#include "eager/grouper.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/numeric/int128.h"

namespace torch_neuron::eager {
namespace {

ir::hash_t Key(uint64_t i) { return absl::MakeUint128(i * 0x9e3779b97f4a7c15ULL, i + 7); }

// (group key, length) of every group that ended in `keys`.
std::vector<std::pair<uint64_t, size_t>> Groups(Grouper& g, const std::vector<uint64_t>& keys) {
  std::vector<std::pair<uint64_t, size_t>> out;
  for (uint64_t k : keys) {
    if (g.Add(Key(k))) out.emplace_back(g.prefix(), g.size());
  }
  return out;
}

// A loop body of 300 ops with few distinct keys, like a model's layers.
std::vector<uint64_t> Body() {
  std::vector<uint64_t> body;
  for (uint64_t i = 0; i < 300; ++i) body.push_back((i * 7 + i / 13) % 41);
  return body;
}

TEST(GrouperTest, EveryIterationOfALoopIsCutTheSameWay) {
  Grouper g;
  std::vector<std::vector<std::pair<uint64_t, size_t>>> per_iteration;
  for (int it = 0; it < 4; ++it) {
    per_iteration.push_back(Groups(g, Body()));
    g.Reset();  // the step's sync
  }
  ASSERT_GT(per_iteration[0].size(), 3u);
  for (int it = 1; it < 4; ++it) EXPECT_EQ(per_iteration[it], per_iteration[0]);
}

TEST(GrouperTest, BoundariesResynchroniseAfterDifferentHistories) {
  // Two streams that differ in their first 37 ops, then run the same 3000:
  // after the first boundary of the shared part, both cut it alike.
  std::vector<uint64_t> shared;
  for (uint64_t i = 0; i < 3000; ++i) shared.push_back((i * 11 + i / 5) % 53);
  std::vector<uint64_t> a, b;
  for (uint64_t i = 0; i < 37; ++i) {
    a.push_back(1000 + i);
    b.push_back(2000 + i * 3);
  }
  a.insert(a.end(), shared.begin(), shared.end());
  b.insert(b.end(), shared.begin(), shared.end());
  Grouper ga, gb;
  auto groups_a = Groups(ga, a), groups_b = Groups(gb, b);
  // The last few groups (well inside the shared part) are identical.
  ASSERT_GT(groups_a.size(), 6u);
  ASSERT_GT(groups_b.size(), 6u);
  std::vector<std::pair<uint64_t, size_t>> tail_a(groups_a.end() - 4, groups_a.end());
  std::vector<std::pair<uint64_t, size_t>> tail_b(groups_b.end() - 4, groups_b.end());
  EXPECT_EQ(tail_a, tail_b);
}

TEST(GrouperTest, GroupLengthsStayWithinTheBounds) {
  GroupingOptions options;
  options.min_ops = 4;
  options.max_ops = 10;
  options.mask = 7;
  Grouper g(options);
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 1000; ++i) keys.push_back(i);
  auto groups = Groups(g, keys);
  ASSERT_FALSE(groups.empty());
  size_t total = 0;
  bool below_max = false;
  for (const auto& [key, size] : groups) {
    EXPECT_GE(size, 4u);
    EXPECT_LE(size, 10u);
    below_max |= size < 10;
    total += size;
  }
  EXPECT_TRUE(below_max);  // content cut some groups before the maximum
  EXPECT_GT(total, 990u);
}

TEST(GrouperTest, ARepeatedKeyIsCutByTheMaximum) {
  // One op over and over: the pair hash never changes, so either every op
  // past the minimum cuts or none does; both stay within the bounds.
  Grouper g;
  std::vector<uint64_t> keys(1000, 5);
  for (const auto& [key, size] : Groups(g, keys)) {
    EXPECT_GE(size, g.options().min_ops);
    EXPECT_LE(size, g.options().max_ops);
  }
}

TEST(GrouperTest, TheKeyNamesTheOpsInOrder) {
  GroupingOptions options;
  options.min_ops = 2;
  options.max_ops = 2;  // every second op ends a group
  Grouper g(options);
  auto ab = Groups(g, {1, 2});
  g.Reset();
  auto ba = Groups(g, {2, 1});
  g.Reset();
  auto ab_again = Groups(g, {1, 2});
  ASSERT_EQ(ab.size(), 1u);
  ASSERT_EQ(ba.size(), 1u);
  EXPECT_NE(ab[0].first, ba[0].first);
  EXPECT_EQ(ab, ab_again);
}

}  // namespace
}  // namespace torch_neuron::eager

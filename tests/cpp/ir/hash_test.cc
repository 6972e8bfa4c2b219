#include "ir/hash.h"

#include <gtest/gtest.h>

namespace torch_neuron::ir {
namespace {

TEST(HashTest, KnownXxh3Value) {
  // XXH3-128 of the empty input with seed 0 (from the xxHash reference).
  EXPECT_EQ(HashToHex(HashBytes("", 0)), "99aa06d3014798d86001c324468d497f");
}

TEST(HashTest, CombineIsOrderDependent) {
  EXPECT_NE(HashCombine(Hash(1), Hash(2)), HashCombine(Hash(2), Hash(1)));
  EXPECT_EQ(MHash(1, 2, 3), HashCombine(HashCombine(Hash(1), Hash(2)), Hash(3)));
}

TEST(HashTest, TypesOfEqualValuesDiffer) {
  EXPECT_NE(Hash(int32_t{7}), Hash(int64_t{7}));
  EXPECT_NE(Hash(1.0f), Hash(1.0));
  EXPECT_NE(Hash(true), Hash(uint8_t{1}));
}

TEST(HashTest, EmptyOptionalHasItsOwnConstant) {
  std::optional<int64_t> none;
  EXPECT_EQ(Hash(none), Hash(std::optional<double>()));
  EXPECT_NE(Hash(none), Hash(std::optional<int64_t>(0)));
  EXPECT_NE(Hash(std::optional<int64_t>(0)), Hash(int64_t{0}));
}

TEST(HashTest, VectorsHashLengthFirst) {
  std::vector<int64_t> ab = {1, 2};
  std::vector<int64_t> a = {1};
  std::vector<int64_t> b = {2};
  EXPECT_NE(MHash(ab, std::vector<int64_t>{}), MHash(a, b));
  EXPECT_EQ(Hash(ab), Hash(std::vector<int64_t>{1, 2}));
}

TEST(HashTest, StringsAndHexAreStable) {
  EXPECT_EQ(Hash("aten::add"), Hash(std::string("aten::add")));
  EXPECT_EQ(HashToHex(Hash("x")).size(), 32u);
}

}  // namespace
}  // namespace torch_neuron::ir

#include "ir/hash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

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

TEST(HashTest, TaggedHashesKeepTagAndBytesApart) {
  // Tags that differ by a little over bytes that differ by a little: as seeds
  // these collided for short inputs (the tag was once the seed).
  const int64_t a[2] = {2, 3}, b[2] = {2, 6};
  EXPECT_NE(HashTagged(kTagShape + 3, a, sizeof(a)), HashTagged(kTagShape + 6, b, sizeof(b)));
  for (uint64_t t = 0; t < 64; ++t) {
    for (int64_t x = 0; x < 64; ++x) {
      const int64_t other = x ^ 1;
      EXPECT_NE(HashTagged(kTagInt + t, &x, sizeof(x)), HashTagged(kTagInt + t + 1, &other, sizeof(other)));
    }
  }
  // Short inputs (hashed from a copy) and long ones (streamed) are the same
  // function: XXH3 of the tag's bytes, then the data's, under one seed.
  for (size_t n : {0, 3, 100}) {
    std::vector<int64_t> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<int64_t>(i * 7);
    std::vector<unsigned char> joined(sizeof(uint64_t) + n * sizeof(int64_t));
    const uint64_t tag = kTagIntList;
    std::memcpy(joined.data(), &tag, sizeof(tag));
    if (n > 0) std::memcpy(joined.data() + sizeof(tag), data.data(), n * sizeof(int64_t));
    EXPECT_EQ(HashTagged(kTagIntList, data.data(), n * sizeof(int64_t)),
              HashBytes(joined.data(), joined.size(), 0x746167676564))
        << n << " elements";
  }
}

}  // namespace
}  // namespace torch_neuron::ir

// A bounded fuzzing run of the remote entry reader for ctest: a sealed entry, an
// unsigned one and one sealed with another key, mutated at random a fixed
// number of times with a fixed seed. Tampering almost never yields a valid tag,
// so the run also counts that none of the mutants opened.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "cache/entry_signature.h"
#include "mutate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace torch_neuron {
namespace {

TEST(RemoteEntryFuzzSmoke, TwentyThousandMutationsNeverCrashOrOpen) {
  constexpr std::string_view kRedisKey = "torch_neuron:neff:00000000000000000000000000000000";
  const std::string payload = std::string("TNNEFF\0\1", 8) + std::string(200, 'x');
  const std::string seeds[3] = {cache::SealEntry("fuzz fleet key", kRedisKey, payload), payload,
                                cache::SealEntry("another key", kRedisKey, payload)};
  ASSERT_TRUE(cache::OpenEntry("fuzz fleet key", kRedisKey, seeds[0]).ok());
  std::mt19937_64 rng(20261207);
  int opened = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string& seed = seeds[i % 3];
    std::string input = seed;
    const int mutations = 1 + static_cast<int>(fuzz::Pick(rng, 4));
    for (int m = 0; m < mutations; ++m) fuzz::MutateOnce(input, seed, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    if (input != seeds[0] && cache::OpenEntry("fuzz fleet key", kRedisKey, input).ok()) ++opened;
  }
  EXPECT_EQ(opened, 0);
}

}  // namespace
}  // namespace torch_neuron

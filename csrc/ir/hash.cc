#include "ir/hash.h"

#include <xxhash.h>

#include "absl/strings/str_format.h"

namespace torch_neuron::ir {

hash_t HashBytes(const void* data, size_t size, uint64_t seed) {
  XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return absl::MakeUint128(h.high64, h.low64);
}

hash_t HashCombine(hash_t a, hash_t b) {
  // Hash the pair as 32 bytes: order-dependent and fully mixed.
  uint64_t words[4] = {absl::Uint128High64(a), absl::Uint128Low64(a), absl::Uint128High64(b),
                       absl::Uint128Low64(b)};
  return HashBytes(words, sizeof(words), 0xc0b1);
}

std::string HashToHex(hash_t h) {
  return absl::StrFormat("%016x%016x", absl::Uint128High64(h), absl::Uint128Low64(h));
}

}  // namespace torch_neuron::ir

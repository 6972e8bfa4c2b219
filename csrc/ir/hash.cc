#include "ir/hash.h"

#include <xxhash.h>

#include <cstring>

#include "absl/strings/str_format.h"

namespace torch_neuron::ir {

hash_t HashBytes(const void* data, size_t size, uint64_t seed) {
  XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return absl::MakeUint128(h.high64, h.low64);
}

hash_t HashTagged(uint64_t tag, const void* data, size_t size) {
  constexpr uint64_t kSeed = 0x746167676564;
  constexpr size_t kInline = 256;
  if (size <= kInline - sizeof(tag)) {  // the usual case: one call over a copy
    unsigned char bytes[kInline];
    std::memcpy(bytes, &tag, sizeof(tag));
    if (size > 0) std::memcpy(bytes + sizeof(tag), data, size);
    return HashBytes(bytes, sizeof(tag) + size, kSeed);
  }
  XXH3_state_t state;  // the same hash of the concatenation, streamed
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset_withSeed(&state, kSeed);
  XXH3_128bits_update(&state, &tag, sizeof(tag));
  XXH3_128bits_update(&state, data, size);
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
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

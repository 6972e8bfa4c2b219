// Hashing for the IR: one overload set, Hash(x), over XXH3-128, and HashCombine
// to fold hashes together. Node hashes and graph hashes are built from these, so
// they are stable across processes and machines (the disk cache depends on it):
// nothing here hashes a pointer or anything that varies between runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/numeric/int128.h"

namespace torch_neuron::ir {

using hash_t = absl::uint128;

// XXH3-128 of raw bytes, with an optional seed.
hash_t HashBytes(const void* data, size_t size, uint64_t seed = 0);

// One hash of a tag and `size` bytes: XXH3 over the tag's 8 bytes, then the
// bytes, under one fixed seed, so that equal bytes of different kinds (an int
// attribute, an int list, a shape) hash apart: one call where tag-then-value
// would take three. The tag goes into the input, not the seed: for short
// inputs XXH3 adds the seed to its secret, so a nearby seed with nearby bytes
// can give the same hash (seeds 3 and 6 over the sizes [2, 3] and [2, 6] did).
hash_t HashTagged(uint64_t tag, const void* data, size_t size);

// Tags of the IR's hashes (HashTagged): distinct 64-bit constants.
enum HashTag : uint64_t {
  kTagNone = 0x746e2d6e6f6e6500ULL,
  kTagBool,
  kTagInt,
  kTagDouble,
  kTagString,
  kTagDevice,
  kTagIntList,
  kTagDoubleList,
  kTagScalarDouble,
  kTagScalarBool,
  kTagScalarInt,
  kTagOperands,     // retired (operand positions are words of a node's hash now);
  kTagOperandList,  // kept so that the tags after them keep their values
  kTagScalarComplex,
  kTagGraph,
  kTagNode,
  kTagSizeGenericGraph,                 // a size-generic graph (graph.h): sizes out of its hash
  kTagShape = 0x746e2d7368700000ULL,    // + the dtype
  kTagOp = 0x746e2d6f70000000ULL,       // + the node kind
  kTagNumbers = 0x746e2d6e756d0000ULL,  // + the element's size (+ 16 if floating)
};

// Order-dependent combination: HashCombine(a, b) != HashCombine(b, a).
hash_t HashCombine(hash_t a, hash_t b);

// Hex text of a hash, 32 lowercase digits (cache keys, file names, logs).
std::string HashToHex(hash_t h);

inline hash_t Hash(std::string_view s) { return HashBytes(s.data(), s.size(), 0x5354); }
inline hash_t Hash(const char* s) { return Hash(std::string_view(s)); }
inline hash_t Hash(const std::string& s) { return Hash(std::string_view(s)); }
inline hash_t Hash(hash_t h) { return h; }

// Arithmetic values hash their bytes, seeded with their size so that int32 7 and
// int64 7 differ; bool gets a width of its own.
template <typename T>
std::enable_if_t<std::is_arithmetic_v<T>, hash_t> Hash(T value) {
  return HashBytes(&value, sizeof(value),
                   sizeof(T) + (std::is_floating_point_v<T> ? 16 : 0) + (std::is_same_v<T, bool> ? 32 : 0));
}

template <typename T>
std::enable_if_t<std::is_enum_v<T>, hash_t> Hash(T value) {
  return Hash(static_cast<std::underlying_type_t<T>>(value));
}

// An empty optional hashes to a constant of its own, distinct from any value's hash
// combined with the "present" marker.
inline constexpr uint64_t kNulloptHashLow = 0x6e756c6c6f707421ULL;  // "nullopt!"
template <typename T>
hash_t Hash(const std::optional<T>& value) {
  if (!value.has_value()) return absl::MakeUint128(0, kNulloptHashLow);
  return HashCombine(Hash(true), Hash(*value));
}

// Sequences hash their length first so that [a, b] + [] and [a] + [b] differ.
// A sequence of numbers is one hash of its bytes (XXH3 covers the length),
// seeded apart from a single number's: a shape hashes in one call, not two
// per dim.
template <typename T>
hash_t Hash(const std::vector<T>& values) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    return HashTagged(kTagNumbers + sizeof(T) + (std::is_floating_point_v<T> ? 16 : 0), values.data(),
                      values.size() * sizeof(T));
  } else {
    hash_t h = Hash(static_cast<uint64_t>(values.size()));
    for (const auto& v : values) h = HashCombine(h, Hash(v));
    return h;
  }
}

// Folds any number of values: MHash(a, b, c) == Combine(Combine(Hash(a), Hash(b)), Hash(c)).
template <typename T, typename... Rest>
hash_t MHash(const T& first, const Rest&... rest) {
  hash_t h = Hash(first);
  ((h = HashCombine(h, Hash(rest))), ...);
  return h;
}

}  // namespace torch_neuron::ir

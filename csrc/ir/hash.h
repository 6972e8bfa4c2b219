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
                   sizeof(T) + (std::is_floating_point_v<T> ? 16 : 0) +
                       (std::is_same_v<T, bool> ? 32 : 0));
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
template <typename T>
hash_t Hash(const std::vector<T>& values) {
  hash_t h = Hash(static_cast<uint64_t>(values.size()));
  for (const auto& v : values) h = HashCombine(h, Hash(v));
  return h;
}

// Folds any number of values: MHash(a, b, c) == Combine(Combine(Hash(a), Hash(b)), Hash(c)).
template <typename T, typename... Rest>
hash_t MHash(const T& first, const Rest&... rest) {
  hash_t h = Hash(first);
  ((h = HashCombine(h, Hash(rest))), ...);
  return h;
}

}  // namespace torch_neuron::ir

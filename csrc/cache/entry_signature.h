// Signed remote entries: who may put code into a fleet's processes.
//
// A NEFF carries native code that the runtime loads and runs, and the NEFF's
// checksum proves only that the bytes are whole, not who wrote them. So with a
// fleet key (TORCH_NEURON_REMOTE_CACHE_KEY or _KEY_FILE) every entry written to
// Redis is sealed with an HMAC-SHA256 over the key, the Redis key it is stored
// under and the NEFF, and an entry read back is opened only when its tag is the
// one this key makes: whoever can write to Redis but has no key can no longer
// make a process load anything. Binding the Redis key stops a genuine entry
// being replayed under another key.
//
//   entry = "TNSIGv1\0" (8 bytes) | tag (32 bytes) | NEFF
//   tag   = HMAC-SHA256(fleet key, "torch_neuron remote entry v1\0" |
//                       u64le(len(redis key)) | redis key | NEFF)
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace torch_neuron::cache {

inline constexpr std::string_view kEntrySealMagic{"TNSIGv1\0", 8};
inline constexpr size_t kEntryTagBytes = 32;

// HMAC-SHA256 of `message` under `key` (RFC 2104 over SHA-256, as RFC 4231
// tests it): 32 raw bytes.
std::string HmacSha256(std::string_view key, std::string_view message);

// The entry stored under `redis_key` for `payload`, sealed with `fleet_key`
// (which must not be empty).
std::string SealEntry(std::string_view fleet_key, std::string_view redis_key, std::string_view payload);

// The payload of `entry` if it was sealed by `fleet_key` for `redis_key`;
// PERMISSION_DENIED when it is unsigned, truncated, or signed with another key,
// for another Redis key, or altered since. Never reads past `entry`.
absl::StatusOr<std::string_view> OpenEntry(std::string_view fleet_key, std::string_view redis_key,
                                           std::string_view entry);

// The payload of an entry read without a fleet key: a sealed entry's NEFF (its
// tag not checked: there is nothing to check it with), else the whole entry.
std::string_view UncheckedPayload(std::string_view entry);

}  // namespace torch_neuron::cache

#include "cache/entry_signature.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace torch_neuron::cache {
namespace {

constexpr std::string_view kDomain{"torch_neuron remote entry v1\0", 29};

// HMAC over the concatenation of `parts`, without building it: a NEFF may be
// tens of megabytes.
std::string Hmac(std::string_view key, std::initializer_list<std::string_view> parts) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  // An empty key is a valid HMAC key; OpenSSL wants a non-null pointer for it.
  static const unsigned char kNoKey = 0;
  const auto* key_bytes = key.empty() ? &kNoKey : reinterpret_cast<const unsigned char*>(key.data());
  bool ok = ctx != nullptr && EVP_MAC_init(ctx, key_bytes, key.size(), params) == 1;
  for (std::string_view part : parts) {
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  }
  std::string tag(kEntryTagBytes, '\0');
  size_t length = 0;
  ok = ok && EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(tag.data()), &length, tag.size()) == 1 &&
       length == kEntryTagBytes;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  // OpenSSL's default provider is linked in: HMAC-SHA256 failing is a broken
  // build, not a condition to handle.
  TORCH_CHECK(ok, "torch_neuron: OpenSSL could not compute HMAC-SHA256");
  return tag;
}

std::string LengthBytes(size_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(n) >> (8 * i)) & 0xff);
  return out;
}

std::string EntryTag(std::string_view fleet_key, std::string_view redis_key, std::string_view payload) {
  return Hmac(fleet_key, {kDomain, LengthBytes(redis_key.size()), redis_key, payload});
}

}  // namespace

std::string HmacSha256(std::string_view key, std::string_view message) { return Hmac(key, {message}); }

std::string SealEntry(std::string_view fleet_key, std::string_view redis_key, std::string_view payload) {
  TORCH_CHECK(!fleet_key.empty(), "torch_neuron: sealing a remote entry needs a fleet key");
  std::string entry(kEntrySealMagic);
  entry += EntryTag(fleet_key, redis_key, payload);
  entry.append(payload.data(), payload.size());
  return entry;
}

absl::StatusOr<std::string_view> OpenEntry(std::string_view fleet_key, std::string_view redis_key,
                                           std::string_view entry) {
  if (entry.size() < kEntrySealMagic.size() + kEntryTagBytes ||
      entry.substr(0, kEntrySealMagic.size()) != kEntrySealMagic) {
    return absl::PermissionDeniedError(
        absl::StrCat("remote entry ", std::string(redis_key), " is not signed"));
  }
  const std::string_view tag = entry.substr(kEntrySealMagic.size(), kEntryTagBytes);
  const std::string_view payload = entry.substr(kEntrySealMagic.size() + kEntryTagBytes);
  const std::string expected = EntryTag(fleet_key, redis_key, payload);
  // Constant time: how many leading bytes matched must not leak.
  if (CRYPTO_memcmp(expected.data(), tag.data(), kEntryTagBytes) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("remote entry ", std::string(redis_key), " is not signed with this fleet key"));
  }
  return payload;
}

std::string_view UncheckedPayload(std::string_view entry) {
  if (entry.size() >= kEntrySealMagic.size() + kEntryTagBytes &&
      entry.substr(0, kEntrySealMagic.size()) == kEntrySealMagic) {
    return entry.substr(kEntrySealMagic.size() + kEntryTagBytes);
  }
  return entry;
}

}  // namespace torch_neuron::cache

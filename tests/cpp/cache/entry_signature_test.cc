#include "cache/entry_signature.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/escaping.h"

namespace torch_neuron::cache {
namespace {

std::string Hex(const std::string& bytes) { return absl::BytesToHexString(bytes); }

// RFC 4231, section 4: the HMAC-SHA-256 results of test cases 1-4, 6 and 7
// (case 5 tests truncated output, which this code never makes).
TEST(HmacSha256Test, MatchesRfc4231) {
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<char>(i));
  EXPECT_EQ(Hex(HmacSha256(key4, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  const std::string long_key(131, '\xaa');
  EXPECT_EQ(Hex(HmacSha256(long_key, "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(Hex(HmacSha256(long_key,
                           "This is a test using a larger than block-size key and a larger than block-size "
                           "data. The key needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(EntrySignatureTest, SealedEntryOpensWithItsKeyToItsPayload) {
  const std::string payload("NEFF\0bytes", 10);
  const std::string entry = SealEntry("fleet-key", "torch_neuron:neff:ab", payload);
  ASSERT_EQ(entry.size(), kEntrySealMagic.size() + kEntryTagBytes + payload.size());
  absl::StatusOr<std::string_view> opened = OpenEntry("fleet-key", "torch_neuron:neff:ab", entry);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, payload);
  EXPECT_EQ(UncheckedPayload(entry), payload);
}

TEST(EntrySignatureTest, RefusesAnotherKeyAnotherRedisKeyAndAnyChangedByte) {
  const std::string payload = "a native object";
  const std::string entry = SealEntry("fleet-key", "k1", payload);
  EXPECT_EQ(OpenEntry("other-key", "k1", entry).status().code(), absl::StatusCode::kPermissionDenied);
  // A genuine entry replayed under another Redis key.
  EXPECT_EQ(OpenEntry("fleet-key", "k2", entry).status().code(), absl::StatusCode::kPermissionDenied);
  for (size_t i = 0; i < entry.size(); ++i) {
    std::string changed = entry;
    changed[i] ^= 0x01;
    EXPECT_EQ(OpenEntry("fleet-key", "k1", changed).status().code(), absl::StatusCode::kPermissionDenied)
        << "byte " << i;
  }
  EXPECT_EQ(OpenEntry("fleet-key", "k1", entry + "x").status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(EntrySignatureTest, RefusesUnsignedAndTruncatedEntries) {
  const std::string entry = SealEntry("fleet-key", "k", "payload");
  for (size_t length = 0; length < entry.size(); ++length) {
    EXPECT_FALSE(OpenEntry("fleet-key", "k", entry.substr(0, length)).ok()) << "length " << length;
  }
  absl::StatusOr<std::string_view> unsigned_entry = OpenEntry("fleet-key", "k", "a plain NEFF");
  EXPECT_EQ(unsigned_entry.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(unsigned_entry.status().message().find("not signed"), std::string_view::npos);
}

TEST(EntrySignatureTest, KeyLengthFieldSeparatesRedisKeyFromPayload) {
  // Without the length, ("k", "1payload") and ("k1", "payload") would MAC the same bytes.
  const std::string entry = SealEntry("fleet-key", "k", "1payload");
  const std::string moved = std::string(kEntrySealMagic) + entry.substr(8, kEntryTagBytes) + "payload";
  EXPECT_FALSE(OpenEntry("fleet-key", "k1", moved).ok());
}

TEST(EntrySignatureTest, UncheckedPayloadOfAnUnsignedEntryIsTheEntry) {
  EXPECT_EQ(UncheckedPayload("plain"), "plain");
  EXPECT_EQ(UncheckedPayload(""), "");
  EXPECT_EQ(UncheckedPayload(kEntrySealMagic), kEntrySealMagic);  // too short to be sealed
}

}  // namespace
}  // namespace torch_neuron::cache

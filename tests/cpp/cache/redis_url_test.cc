#include <gtest/gtest.h>

#include "cache/remote_provider.h"

namespace torch_neuron::cache {
namespace {

TEST(RedisUrlTest, HostPortAndDb) {
  absl::StatusOr<RedisAddress> a = ParseRedisUrl("redis://cache.internal:6380/2");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "cache.internal");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  EXPECT_TRUE(a->password.empty());
  EXPECT_FALSE(a->tls);
}

TEST(RedisUrlTest, UserAndPasswordPercentDecoded) {
  absl::StatusOr<RedisAddress> a = ParseRedisUrl("redis://fleet:p%40ss%2Fw@10.0.0.5:7000/1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->username, "fleet");
  EXPECT_EQ(a->password, "p@ss/w");
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 7000);
  EXPECT_EQ(a->db, 1);
}

TEST(RedisUrlTest, PasswordAloneEitherSpelling) {
  absl::StatusOr<RedisAddress> a = ParseRedisUrl("redis://:secret@host");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->username, "");
  EXPECT_EQ(a->password, "secret");
  EXPECT_EQ(a->port, 6379);
  absl::StatusOr<RedisAddress> b = ParseRedisUrl("redis://secret@host");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->password, "secret");
  EXPECT_EQ(b->host, "host");
}

TEST(RedisUrlTest, TlsWithCaFile) {
  absl::StatusOr<RedisAddress> a =
      ParseRedisUrl("rediss://:pw@host:6390/0?ssl_ca_certs=/etc/ca%20dir/ca.pem");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->ca_file, "/etc/ca dir/ca.pem");
  EXPECT_EQ(a->port, 6390);
}

TEST(RedisUrlTest, RefusesOtherSchemesBadPortsAndOptionsWithoutShowingThePassword) {
  for (const char* url :
       {"http://host", "redis://", "redis://host:0", "redis://host:x/1", "redis://host/-1",
        "redis://:pw@host?ssl_ca_certs=/ca.pem", "rediss://host?other=1", "redis://:p%4@host"}) {
    absl::StatusOr<RedisAddress> a = ParseRedisUrl(url);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << url;
  }
  absl::StatusOr<RedisAddress> bad = ParseRedisUrl("redis://:hunter2@host:x");
  EXPECT_EQ(std::string(bad.status().message()).find("hunter2"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace torch_neuron::cache

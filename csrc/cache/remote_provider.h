#pragma once
// L3: NEFFs in Redis, shared by a fleet of machines (TORCH_NEURON_REMOTE_CACHE=
// redis[s]://[user:password@]host:port/db, the convention of PyTorch Inductor's
// remote cache). Read
// after the disk, written after every compile (the chain's write-back). Every
// entry read is verified by the NEFF reader (checksum, fingerprint, structure);
// a corrupt one is deleted and reported as a miss, so the graph is compiled and
// the entry written again. A Redis that cannot be reached is UNAVAILABLE (warned
// once; not asked again for 30 s), never an error of the user's program.
//
// With a fleet key every entry is signed on write and checked on read
// (cache/entry_signature.h): an unsigned or wrongly signed entry is never
// loaded (remote.untrusted.count, warned once) and the graph is compiled here,
// its signed entry then written over the refused one. Without a key entries
// are written unsigned and read unchecked, as anyone who can write to the
// Redis could write them.
//
// hiredis is linked statically (and hidden) into libtorch_neuron.so: the level
// works wherever the wheel is installed, and the code always calls the hiredis
// whose headers it was compiled against (1.x changed redisContext and redisReply).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/executable_provider.h"
#include "cache/tls_stream.h"

namespace torch_neuron::cache {

struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string username;  // AUTH username ("": the default user)
  std::string password;  // AUTH password ("": no AUTH)
  bool tls = false;      // rediss://
  std::string ca_file;   // ?ssl_ca_certs=: CA bundle for the server's certificate ("": the system's)
};

// "redis://[[user]:password@]host[:port][/db]", or "rediss://..." for TLS with
// an optional "?ssl_ca_certs=/path/ca.pem" (redis-py's name); user, password
// and path percent-decoded. INVALID_ARGUMENT otherwise, the password not shown.
absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url);

// One connection to Redis, commands serialized. Thread-safe.
class RedisConnection {
 public:
  explicit RedisConnection(RedisAddress address, double timeout_s = 5.0);
  ~RedisConnection();

  // GET: the value, NOT_FOUND for none, UNAVAILABLE when Redis cannot answer.
  absl::StatusOr<std::string> Get(const std::string& key);
  absl::Status Set(const std::string& key, const std::string& value);
  absl::Status Delete(const std::string& key);
  // Every key with `prefix` (SCAN).
  absl::StatusOr<std::vector<std::string>> Keys(const std::string& prefix);

 private:
  absl::StatusOr<std::vector<std::string>> Command(const std::vector<std::string>& args, bool* nil)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Connect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends one command and returns its reply (redisReply*, the caller frees),
  // through TLS when the URL asks for it; nullptr when the connection failed.
  void* Roundtrip(const std::vector<std::string>& args, std::string* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RedisAddress address_;
  const double timeout_s_;
  absl::Mutex mu_;
  void* context_ ABSL_GUARDED_BY(mu_) = nullptr;         // redisContext*
  std::unique_ptr<TlsStream> tls_ ABSL_GUARDED_BY(mu_);  // over context_'s socket, for rediss://
  int64_t retry_after_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// The key an executable is stored under.
std::string RemoteKey(const std::string& key_hex);
inline constexpr const char* kRemoteKeyPrefix = "torch_neuron:neff:";

// The NEFF stored for `key_hex`: NOT_FOUND for none, UNAVAILABLE when Redis
// cannot answer, PERMISSION_DENIED for an entry `fleet_key` did not sign
// (counted in remote.untrusted.count and warned once). With no fleet key
// ("") the entry is taken unchecked. Not yet read by the NEFF reader.
absl::StatusOr<std::string> LoadRemoteEntry(RedisConnection& redis, const std::string& fleet_key,
                                            const std::string& key_hex);
// Writes `neff` for `key_hex`, signed when there is a fleet key.
absl::Status StoreRemoteEntry(RedisConnection& redis, const std::string& fleet_key,
                              const std::string& key_hex, std::string_view neff);

class RemoteProvider : public ExecutableProvider {
 public:
  // `fleet_key`: TORCH_NEURON_REMOTE_CACHE_KEY's text, "" for none.
  RemoteProvider(RedisAddress address, std::string fleet_key)
      : redis_(std::move(address)), fleet_key_(std::move(fleet_key)) {}
  const char* name() const override { return "remote"; }
  absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest& request, RequestHolds& holds) override;
  absl::Status Keep(const ExecutableRequest& request, const ProvidedExecutable& found) override;

 private:
  RedisConnection redis_;
  const std::string fleet_key_;
};

}  // namespace torch_neuron::cache

#pragma once
// L3: NEFFs in Redis, shared by a fleet of machines (TORCH_NEURON_REMOTE_CACHE=
// redis://host:port/db, the convention of PyTorch Inductor's remote cache). Read
// after the disk, written after every compile (the chain's write-back). Every
// entry read is verified by the NEFF reader (checksum, fingerprint, structure);
// a corrupt one is deleted and reported as a miss, so the graph is compiled and
// the entry written again. A Redis that cannot be reached is UNAVAILABLE (warned
// once; not asked again for 30 s), never an error of the user's program.
//
// hiredis is linked statically (and hidden) into libtorch_neuron.so: the level
// works wherever the wheel is installed, and the code always calls the hiredis
// whose headers it was compiled against (1.x changed redisContext and redisReply).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/executable_provider.h"

namespace torch_neuron::cache {

struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
};

// "redis://host:port/db" (port and db optional). INVALID_ARGUMENT otherwise.
absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url);

// One connection to Redis, commands serialized. Thread-safe.
class RedisConnection {
 public:
  explicit RedisConnection(RedisAddress address, double timeout_s = 5.0)
      : address_(std::move(address)), timeout_s_(timeout_s) {}
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
  void Drop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RedisAddress address_;
  const double timeout_s_;
  absl::Mutex mu_;
  void* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // redisContext*
  int64_t retry_after_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// The key an executable is stored under.
std::string RemoteKey(const std::string& key_hex);
inline constexpr const char* kRemoteKeyPrefix = "torch_neuron:neff:";

class RemoteProvider : public ExecutableProvider {
 public:
  explicit RemoteProvider(RedisAddress address) : redis_(std::move(address)) {}
  const char* name() const override { return "remote"; }
  absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest& request, RequestHolds& holds) override;
  absl::Status Keep(const ExecutableRequest& request, const ProvidedExecutable& found) override;

 private:
  RedisConnection redis_;
};

}  // namespace torch_neuron::cache

// The compile service's client: a provider of the chain (after the disk, before
// the local compiler). It sends the graph as a CompileRequest and loads the NEFF
// the service answers with, through the NEFF reader, as any executable. Anything
// that keeps the service from answering (none running and none startable, a
// refused connection, a timeout, an error reply, a reply the reader rejects) is
// UNAVAILABLE: the chain compiles here, counted in service.fallback.count (and
// by reason), never an error of the user's program.
//
// The service stands in front of the remote cache: it reads and writes Redis
// for its clients on the one connection it keeps (the client names the URL in
// each request), so a process whose service answers never connects to Redis.
// Only when the service cannot answer does the provider ask the remote level
// itself (`direct_remote`), and it writes what the local compiler then makes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/config.h"
#include "cache/chain_assembly.h"
#include "cache/executable_provider.h"
#include "proto/service.pb.h"
#include "service/framing.h"

namespace torch_neuron::service {

struct ClientOptions {
  std::string mode = "auto";     // "auto" (this user's service, started on need) or a socket path
  std::string cache_dir;         // where the auto service's directory lives
  std::string toolchain;         // names the service's directory, with the compiler's sources
  double timeout_s = 600;        // for a reply
  std::string remote_cache;      // TORCH_NEURON_REMOTE_CACHE, passed on to the service ("": none)
  std::string remote_cache_key;  // its fleet key, passed on too ("": entries unsigned)
};

// The client options of cache sub-config `config` (its compile service, cache
// directory, reply timeout, remote cache and fleet key) for C++ compiler
// `toolchain`.
ClientOptions ClientOptionsFor(const CacheConfig& config, const std::string& toolchain);

// The service directory and socket `options` lead to.
std::string ServiceDirFor(const ClientOptions& options);
std::string SocketFor(const ClientOptions& options);

// How to start a service: the argv of `python -m torch_neuron.service serve`,
// set by the Python package at import; empty: auto mode cannot start one.
void SetLauncher(std::vector<std::string> argv);

// Connects to the service, starting one in auto mode if none answers (one
// client starts it, under a lock in its directory). Returns the connected fd.
absl::StatusOr<int> Connect(const ClientOptions& options, bool start_if_needed);

// Connect(options, true) on a thread of its own, the connection then closed: a
// process in auto mode starts the service when it starts, so that the service
// is up by the time its first graph needs compiling.
void StartInBackground(const ClientOptions& options);

// One request and its reply on a fresh connection.
absl::StatusOr<proto::ServiceReply> Call(const ClientOptions& options, const proto::ServiceRequest& request,
                                         bool start_if_needed, double timeout_s);

// Why the last request fell back to compiling here ("" if none did).
std::string LastFallbackReason();

class ServiceProvider : public cache::ExecutableProvider {
 public:
  // `direct_remote`: the remote level, asked here only when the service
  // cannot answer (nullptr: no remote cache).
  ServiceProvider(ClientOptions options, std::unique_ptr<cache::ExecutableProvider> direct_remote)
      : options_(std::move(options)), direct_remote_(std::move(direct_remote)) {}
  const char* name() const override { return "service"; }
  absl::StatusOr<cache::ProvidedExecutable> Get(const cache::ExecutableRequest& request,
                                                cache::RequestHolds& holds) override;
  // Called only when a provider below answered (the service could not): the
  // remote level keeps what was compiled here.
  absl::Status Keep(const cache::ExecutableRequest& request, const cache::ProvidedExecutable& found) override;

 private:
  absl::StatusOr<cache::ProvidedExecutable> AskService(const cache::ExecutableRequest& request);

  const ClientOptions options_;
  const std::unique_ptr<cache::ExecutableProvider> direct_remote_;
};

// The chain's service level for cache::AssembleChain: a ServiceProvider of
// ClientOptionsFor(config, toolchain), owning the remote level it stands in
// front of (which its requests then name to the service).
cache::ServiceLevel ServiceLevelFor(const CacheConfig& config, const std::string& toolchain);

}  // namespace torch_neuron::service

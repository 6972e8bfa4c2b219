// The compile service's client: a provider of the chain (after the disk, before
// the local compiler). It sends the graph as a CompileRequest and loads the NEFF
// the service answers with, through the NEFF reader, as any executable. Anything
// that keeps the service from answering (none running and none startable, a
// refused connection, a timeout, an error reply, a reply the reader rejects) is
// UNAVAILABLE: the chain compiles here, counted in service.fallback.count (and
// by reason), never an error of the user's program.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/executable_provider.h"
#include "proto/service.pb.h"
#include "service/framing.h"

namespace torch_neuron::service {

struct ClientOptions {
  std::string mode = "auto";  // "auto" (this user's service, started on need) or a socket path
  std::string cache_dir;      // where the auto service's directory lives
  std::string toolchain;      // names the service's directory, with the compiler's sources
  double timeout_s = 600;     // for a reply
};

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
  explicit ServiceProvider(ClientOptions options) : options_(std::move(options)) {}
  const char* name() const override { return "service"; }
  absl::StatusOr<cache::ProvidedExecutable> Get(const cache::ExecutableRequest& request,
                                                cache::RequestHolds& holds) override;

 private:
  const ClientOptions options_;
};

}  // namespace torch_neuron::service

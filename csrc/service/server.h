// The compile service (DESIGN.md "Compile service"): one process per machine,
// user and compiler, serving compile requests on a Unix socket so that each
// graph is compiled once for all the processes that need it.
//
// It accepts connections from its own uid only (SO_PEERCRED; others are closed
// and logged), reads length-framed ServiceRequests (framing.h) with a size
// limit and a per-request deadline, and answers each with a ServiceReply: a
// malformed, truncated or oversized request gets an error reply (or, when the
// frame itself is broken, a closed connection) and the service goes on. Compile
// requests are single-flight per cache key (a second request for a key being
// compiled waits for it), run on at most `workers` compiles at once, are
// answered from the disk cache when it holds the key, and are written to it
// after compiling (atomically: a killed service leaves no partial entry).
// The service exits after `idle_s` seconds without a request, or on a
// shutdown request.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/compile_request.h"
#include "proto/service.pb.h"

namespace torch_neuron::service {

// One request frame read: the message, and for a compile request its graph
// (validated and hash-checked). The service's request reader (fuzzed).
struct ParsedRequest {
  proto::ServiceRequest message;
  std::unique_ptr<compiler::RequestGraph> graph;  // compile requests
};
// INVALID_ARGUMENT for anything but a request a client of this protocol makes.
absl::StatusOr<ParsedRequest> ParseServiceRequest(std::string_view frame);

struct ServerOptions {
  std::string dir;        // the service directory (0700): socket, lock, log, pid
  std::string cache_dir;  // the disk cache it reads and writes ("": none)
  int64_t cache_max_mb = 10240;
  std::string toolchain;  // tier 1's C++ compiler ("": c++)
  double idle_s = 600;
  int workers = 0;                // 0: one per core
  double request_timeout_s = 60;  // to read one request once it began
  int test_delay_ms = 0;          // test only: each compile waits this long first
};

// Serves until idle or shut down. Returns an error if the socket cannot be
// made (another service holds it: ALREADY_EXISTS).
absl::Status Serve(const ServerOptions& options);

}  // namespace torch_neuron::service

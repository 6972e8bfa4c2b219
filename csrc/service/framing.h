// Length-framed messages on a stream socket (the compile service's wire:
// service.proto): a 4-byte little-endian length, then the bytes. Reads and
// writes retry short transfers and EINTR, and give up at a deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torch_neuron::service {

using Clock = std::chrono::steady_clock;

// The largest frame either side accepts: a CompileRequest's limit plus room.
inline constexpr size_t kMaxFrameBytes = (size_t{256} << 20) + 4096;
inline constexpr uint32_t kProtocolVersion = 1;

// Writes one frame; UNAVAILABLE if the peer went away or the deadline passed.
absl::Status WriteFrame(int fd, std::string_view bytes, Clock::time_point deadline);

// Reads one frame. NOT_FOUND: the peer closed the connection before a frame
// began (a clean end); UNAVAILABLE: it went away inside one, or the deadline
// passed; RESOURCE_EXHAUSTED: the length is over `max_bytes` (nothing of the
// body is read: the caller replies and closes).
absl::StatusOr<std::string> ReadFrame(int fd, Clock::time_point deadline, size_t max_bytes = kMaxFrameBytes);

// The directory of the service of this user for a compiler identity, under
// the cache dir: "<cache_dir>/service-<identity>", and the socket in it.
std::string ServiceDir(const std::string& cache_dir, const std::string& identity);
inline std::string SocketPath(const std::string& dir) { return dir + "/socket"; }

}  // namespace torch_neuron::service

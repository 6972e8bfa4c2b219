#include "service/framing.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace torch_neuron::service {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status WaitReady(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return absl::UnavailableError("timed out");
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
  }
}

// Reads exactly `size` bytes. Returns the number read before the peer closed
// (less than `size`) or an error.
absl::StatusOr<size_t> ReadFully(int fd, char* out, size_t size, Clock::time_point deadline) {
  size_t done = 0;
  while (done < size) {
    absl::Status ready = WaitReady(fd, POLLIN, deadline);
    if (!ready.ok()) return ready;
    const ssize_t n = ::recv(fd, out + done, size - done, 0);
    if (n == 0) return done;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

absl::Status WriteFrame(int fd, std::string_view bytes, Clock::time_point deadline) {
  if (bytes.size() > kMaxFrameBytes) return absl::ResourceExhaustedError("frame too large");
  const uint32_t length = static_cast<uint32_t>(bytes.size());
  char header[4];
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  for (std::string_view part : {std::string_view(header, 4), bytes}) {
    size_t done = 0;
    while (done < part.size()) {
      absl::Status ready = WaitReady(fd, POLLOUT, deadline);
      if (!ready.ok()) return ready;
      const ssize_t n = ::send(fd, part.data() + done, part.size() - done, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFrame(int fd, Clock::time_point deadline, size_t max_bytes) {
  char header[4];
  absl::StatusOr<size_t> got = ReadFully(fd, header, 4, deadline);
  if (!got.ok()) return got.status();
  if (*got == 0) return absl::NotFoundError("the peer closed the connection");
  if (*got < 4) return absl::UnavailableError("the peer closed the connection inside a frame header");
  uint32_t length = 0;
  for (int i = 0; i < 4; ++i)
    length |= static_cast<uint32_t>(static_cast<unsigned char>(header[i])) << (8 * i);
  if (length > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a frame of ", length, " bytes (the limit is ", max_bytes, ")"));
  }
  std::string body(length, '\0');
  got = ReadFully(fd, body.data(), length, deadline);
  if (!got.ok()) return got.status();
  if (*got < length) {
    return absl::UnavailableError(
        absl::StrCat("the peer closed the connection after ", *got, " of ", length, " bytes of a frame"));
  }
  return body;
}

std::string ServiceDir(const std::string& cache_dir, const std::string& identity) {
  return absl::StrCat(cache_dir, "/service-", identity);
}

}  // namespace torch_neuron::service

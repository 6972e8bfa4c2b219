// TLS over a connected socket, for rediss:// remote caches.
//
// The Debian hiredis (0.14) has no TLS of its own, so the remote cache's
// connection lets hiredis connect the socket and parse replies, and sends and
// receives the bytes through this stream when the URL asks for TLS. The peer's
// certificate is verified against the CA file given (else the system's CA
// store) and must name the host connected to. OpenSSL is linked statically and
// hidden, as hiredis is. Not thread-safe: the connection that owns it
// serializes its use.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torch_neuron::cache {

class TlsStream {
 public:
  // Handshakes over `fd` (connected, blocking, with the timeouts it should
  // have). UNAVAILABLE on failure, naming why (an unverifiable certificate
  // included). Does not own `fd`.
  static absl::StatusOr<std::unique_ptr<TlsStream>> Connect(int fd, const std::string& host,
                                                            const std::string& ca_file);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  absl::Status WriteAll(std::string_view bytes);
  // Up to `capacity` bytes into `buffer` (at least one); UNAVAILABLE when the
  // peer closed or the read timed out.
  absl::StatusOr<size_t> Read(char* buffer, size_t capacity);

 private:
  TlsStream(void* ctx, void* ssl) : ctx_(ctx), ssl_(ssl) {}
  void* ctx_;  // SSL_CTX*
  void* ssl_;  // SSL*
};

}  // namespace torch_neuron::cache

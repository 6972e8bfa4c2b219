#include "cache/tls_stream.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"

namespace torch_neuron::cache {
namespace {

// The first queued OpenSSL error, or `fallback` when there is none.
std::string OpenSslError(const char* fallback) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return fallback;
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsStream>> TlsStream::Connect(int fd, const std::string& host,
                                                              const std::string& ca_file) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return absl::UnavailableError(absl::StrCat("TLS: ", OpenSslError("no context")));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  const int loaded = ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx)
                                     : SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr);
  if (loaded != 1) {
    const std::string why = OpenSslError("no CA certificates");
    SSL_CTX_free(ctx);
    return absl::UnavailableError(absl::StrCat("TLS: cannot load CA certificates",
                                               ca_file.empty() ? "" : " from " + ca_file, ": ", why));
  }
  SSL* ssl = SSL_new(ctx);
  std::unique_ptr<TlsStream> stream(new TlsStream(ctx, ssl));
  if (ssl == nullptr) return absl::UnavailableError(absl::StrCat("TLS: ", OpenSslError("no session")));
  // The certificate must name the host we meant to reach (a name or an address).
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  const bool named = X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1 ||
                     X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) == 1;
  ERR_clear_error();  // set1_ip_asc fails on a name: expected
  if (!named) return absl::UnavailableError(absl::StrCat("TLS: cannot check certificates for ", host));
  SSL_set_tlsext_host_name(ssl, host.c_str());
  if (SSL_set_fd(ssl, fd) != 1 || SSL_connect(ssl) != 1) {
    const long verify = SSL_get_verify_result(ssl);
    const std::string why =
        verify != X509_V_OK ? X509_verify_cert_error_string(verify) : OpenSslError("handshake failed");
    return absl::UnavailableError(absl::StrCat("TLS handshake with ", host, ": ", why));
  }
  return stream;
}

TlsStream::~TlsStream() {
  if (ssl_ != nullptr) SSL_free(static_cast<SSL*>(ssl_));
  SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
}

absl::Status TlsStream::WriteAll(std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    size_t written = 0;
    if (SSL_write_ex(static_cast<SSL*>(ssl_), bytes.data() + done, bytes.size() - done, &written) != 1) {
      return absl::UnavailableError(absl::StrCat("TLS write: ", OpenSslError("connection lost")));
    }
    done += written;
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> TlsStream::Read(char* buffer, size_t capacity) {
  size_t got = 0;
  if (SSL_read_ex(static_cast<SSL*>(ssl_), buffer, capacity, &got) != 1 || got == 0) {
    return absl::UnavailableError(absl::StrCat("TLS read: ", OpenSslError("connection closed or timed out")));
  }
  return got;
}

}  // namespace torch_neuron::cache

#include "cache/remote_provider.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <chrono>
#include <optional>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/metrics.h"
#include "cache/entry_signature.h"
#include "c10/util/Exception.h"
#include "neff/neff_reader.h"
#include "runtime/native_library.h"

namespace torch_neuron::cache {
namespace {

struct RemoteMetrics {
  metrics::Counter* hits = metrics::GetCounter("remote.hit.count");
  metrics::Counter* misses = metrics::GetCounter("remote.miss.count");
  metrics::Counter* corrupt = metrics::GetCounter("remote.corrupt.count");
  metrics::Counter* stores = metrics::GetCounter("remote.store.count");
  metrics::Counter* unavailable = metrics::GetCounter("remote.unavailable.count");
  metrics::Counter* untrusted = metrics::GetCounter("remote.untrusted.count");
};

const RemoteMetrics& Counters() {
  static const RemoteMetrics* counters = new RemoteMetrics();
  return *counters;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::optional<std::string> PercentDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    int value = 0;
    if (i + 2 >= text.size()) return std::nullopt;
    for (int k = 1; k <= 2; ++k) {
      const char c = text[i + k];
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + digit;
    }
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

timeval Timeval(double seconds) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url) {
  RedisAddress address;
  std::string rest;
  if (absl::StartsWith(url, "redis://")) {
    rest = url.substr(8);
  } else if (absl::StartsWith(url, "rediss://")) {
    rest = url.substr(9);
    address.tls = true;
  }
  // Up to the scheme only: the rest may hold a password.
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url.substr(0, url.find("://") + 3),
                     "...' is not a redis[s]://[[user]:password@]host[:port][/db] URL (", why, ")"));
  };
  if (rest.empty()) return invalid("no host");
  // The password may hold '@' and '/' (percent-encoded or not): the host starts
  // after the last '@'.
  const size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    std::optional<std::string> user = PercentDecode(userinfo.substr(0, colon));
    std::optional<std::string> password = colon == std::string::npos
                                              ? std::optional<std::string>("")
                                              : PercentDecode(userinfo.substr(colon + 1));
    if (!user || !password) return invalid("bad percent-encoding");
    if (colon == std::string::npos) {
      // "redis://secret@host" is how some clients spell a password alone.
      address.password = *user;
    } else {
      address.username = *user;
      address.password = *password;
    }
  }
  const size_t question = rest.find('?');
  if (question != std::string::npos) {
    const std::vector<std::string> options =
        absl::StrSplit(rest.substr(question + 1), '&', absl::SkipEmpty());
    for (const std::string& option : options) {
      const size_t eq = option.find('=');
      std::optional<std::string> value =
          eq == std::string::npos ? std::nullopt : PercentDecode(option.substr(eq + 1));
      if (option.substr(0, eq) == "ssl_ca_certs" && value && address.tls) {
        address.ca_file = *value;
      } else {
        return invalid(absl::StrCat("unknown option ", option.substr(0, eq)));
      }
    }
    rest = rest.substr(0, question);
  }
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(db, &address.db) || address.db < 0)) return invalid("bad db");
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &address.port) || address.port <= 0 ||
        address.port > 65535) {
      return invalid("bad port");
    }
    rest = rest.substr(0, colon);
  }
  if (!rest.empty()) address.host = rest;
  return address;
}

std::string RemoteKey(const std::string& key_hex) { return absl::StrCat(kRemoteKeyPrefix, key_hex); }

RedisConnection::RedisConnection(RedisAddress address, double timeout_s)
    : address_(std::move(address)), timeout_s_(timeout_s) {}

RedisConnection::~RedisConnection() {
  absl::MutexLock lock(&mu_);
  Drop();
}

void RedisConnection::Drop() {
  tls_.reset();  // before the socket it runs over
  if (context_ != nullptr) redisFree(static_cast<redisContext*>(context_));
  context_ = nullptr;
}

absl::Status RedisConnection::Connect() {
  if (context_ != nullptr) return absl::OkStatus();
  const std::string where = absl::StrCat("Redis at ", address_.host, ":", address_.port);
  if (NowNs() < retry_after_ns_)
    return absl::UnavailableError(absl::StrCat(where, " was unreachable a moment ago"));
  auto unreachable = [&](const std::string& why) {
    Drop();
    retry_after_ns_ = NowNs() + int64_t{30} * 1000000000;
    return absl::UnavailableError(absl::StrCat(where, ": ", why));
  };
  redisContext* c = redisConnectWithTimeout(address_.host.c_str(), address_.port, Timeval(timeout_s_));
  if (c == nullptr || c->err != 0) {
    const std::string why = c != nullptr ? c->errstr : "out of memory";
    if (c != nullptr) redisFree(c);
    return unreachable(why);
  }
  redisSetTimeout(c, Timeval(timeout_s_));
  context_ = c;
  if (address_.tls) {
    absl::StatusOr<std::unique_ptr<TlsStream>> tls =
        TlsStream::Connect(c->fd, address_.host, address_.ca_file);
    if (!tls.ok()) return unreachable(std::string(tls.status().message()));
    tls_ = *std::move(tls);
  }
  bool nil = false;
  if (!address_.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!address_.username.empty()) auth.push_back(address_.username);
    auth.push_back(address_.password);
    absl::StatusOr<std::vector<std::string>> authed = Command(auth, &nil);
    // A refused password is not retried for every graph either.
    if (!authed.ok()) return unreachable(absl::StrCat("AUTH refused: ", authed.status().message()));
  }
  if (address_.db != 0) {
    absl::StatusOr<std::vector<std::string>> selected =
        Command({"SELECT", std::to_string(address_.db)}, &nil);
    if (!selected.ok()) return selected.status();
  }
  return absl::OkStatus();
}

void* RedisConnection::Roundtrip(const std::vector<std::string>& args, std::string* why) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* c = static_cast<redisContext*>(context_);
  if (tls_ == nullptr) {
    void* reply = redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data());
    if (reply == nullptr) *why = c->errstr;
    return reply;
  }
  // hiredis formats the command and parses the reply; the bytes go through TLS.
  char* command = nullptr;
  const int length =
      redisFormatCommandArgv(&command, static_cast<int>(argv.size()), argv.data(), lengths.data());
  if (length < 0) {
    *why = "out of memory";
    return nullptr;
  }
  absl::Status sent = tls_->WriteAll(std::string_view(command, static_cast<size_t>(length)));
  redisFreeCommand(command);
  if (!sent.ok()) {
    *why = std::string(sent.message());
    return nullptr;
  }
  void* reply = nullptr;
  char buffer[16384];
  while (true) {
    if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
      *why = "malformed reply";
      return nullptr;
    }
    if (reply != nullptr) return reply;
    absl::StatusOr<size_t> got = tls_->Read(buffer, sizeof(buffer));
    if (!got.ok()) {
      *why = std::string(got.status().message());
      return nullptr;
    }
    if (redisReaderFeed(c->reader, buffer, *got) != REDIS_OK) {
      *why = "malformed reply";
      return nullptr;
    }
  }
}

absl::StatusOr<std::vector<std::string>> RedisConnection::Command(const std::vector<std::string>& args,
                                                                  bool* nil) {
  *nil = false;
  absl::Status connected = Connect();
  if (!connected.ok()) return connected;
  std::string why;
  auto* reply = static_cast<redisReply*>(Roundtrip(args, &why));
  if (reply == nullptr) {
    Drop();  // a broken connection is made again on the next command
    retry_after_ns_ = NowNs() + int64_t{30} * 1000000000;
    return absl::UnavailableError(absl::StrCat("Redis at ", address_.host, ":", address_.port, ": ", why));
  }
  absl::StatusOr<std::vector<std::string>> out = std::vector<std::string>();
  switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out->emplace_back(reply->str, reply->len);
      break;
    case REDIS_REPLY_INTEGER:
      out->push_back(std::to_string(reply->integer));
      break;
    case REDIS_REPLY_NIL:
      *nil = true;
      break;
    case REDIS_REPLY_ARRAY:
      for (size_t i = 0; i < reply->elements; ++i) {
        const redisReply* e = reply->element[i];
        if (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) {
          out->emplace_back(e->str, e->len);
        } else if (e->type == REDIS_REPLY_ARRAY) {  // SCAN's second element: the keys
          for (size_t k = 0; k < e->elements; ++k) out->emplace_back(e->element[k]->str, e->element[k]->len);
        }
      }
      break;
    case REDIS_REPLY_ERROR:
    default:
      out = absl::UnavailableError(absl::StrCat("Redis: ", std::string(reply->str, reply->len)));
      break;
  }
  freeReplyObject(reply);
  return out;
}

absl::StatusOr<std::string> RedisConnection::Get(const std::string& key) {
  absl::MutexLock lock(&mu_);
  bool nil = false;
  absl::StatusOr<std::vector<std::string>> r = Command({"GET", key}, &nil);
  if (!r.ok()) return r.status();
  if (nil || r->empty()) return absl::NotFoundError(key);
  return (*r)[0];
}

absl::Status RedisConnection::Set(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  bool nil = false;
  return Command({"SET", key, value}, &nil).status();
}

absl::Status RedisConnection::Delete(const std::string& key) {
  absl::MutexLock lock(&mu_);
  bool nil = false;
  return Command({"DEL", key}, &nil).status();
}

absl::StatusOr<std::vector<std::string>> RedisConnection::Keys(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    bool nil = false;
    absl::StatusOr<std::vector<std::string>> page =
        Command({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"}, &nil);
    if (!page.ok()) return page.status();
    if (page->empty()) break;
    cursor = (*page)[0];
    keys.insert(keys.end(), page->begin() + 1, page->end());
  } while (cursor != "0");
  return keys;
}

absl::StatusOr<std::string> LoadRemoteEntry(RedisConnection& redis, const std::string& fleet_key,
                                            const std::string& key_hex) {
  const std::string key = RemoteKey(key_hex);
  absl::StatusOr<std::string> entry = redis.Get(key);
  if (!entry.ok()) return entry.status();
  if (fleet_key.empty()) return std::string(UncheckedPayload(*entry));
  absl::StatusOr<std::string_view> payload = OpenEntry(fleet_key, key, *entry);
  if (!payload.ok()) {
    Counters().untrusted->Add(1);
    TORCH_WARN_ONCE("torch_neuron: refused a remote compile cache entry (", payload.status().message(),
                    "); graphs it would have given are compiled here. remote.untrusted.count counts them.");
    return payload.status();
  }
  return std::string(*payload);
}

absl::Status StoreRemoteEntry(RedisConnection& redis, const std::string& fleet_key,
                              const std::string& key_hex, std::string_view neff) {
  const std::string key = RemoteKey(key_hex);
  return redis.Set(key, fleet_key.empty() ? std::string(neff) : SealEntry(fleet_key, key, neff));
}

absl::StatusOr<ProvidedExecutable> RemoteProvider::Get(const ExecutableRequest& request,
                                                       RequestHolds& holds) {
  (void)holds;
  if (request.stand_in) return absl::NotFoundError("stand-ins are not kept in Redis");
  const std::string key = RemoteKey(request.KeyHex());
  absl::StatusOr<std::string> bytes = LoadRemoteEntry(redis_, fleet_key_, request.KeyHex());
  if (bytes.status().code() == absl::StatusCode::kPermissionDenied) {
    // Never loaded: the graph is compiled here and its signed entry written over this one.
    return absl::NotFoundError(bytes.status().message());
  }
  if (bytes.status().code() == absl::StatusCode::kNotFound) {
    Counters().misses->Add(1);
    return bytes.status();
  }
  if (!bytes.ok()) {
    Counters().unavailable->Add(1);
    TORCH_WARN_ONCE("torch_neuron: the remote compile cache is unavailable (", bytes.status().message(),
                    "); graphs are compiled without it");
    return absl::UnavailableError(bytes.status().message());
  }
  absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(*bytes, request.fingerprint);
  if (!loaded.ok()) {
    // Corrupt, truncated, or of another compiler (a key collision would need
    // equal graph and fingerprint hashes): dropped and compiled again.
    Counters().corrupt->Add(1);
    (void)redis_.Delete(key);
    return absl::NotFoundError(absl::StrCat("remote entry ", key, " rejected: ", loaded.status().message()));
  }
  runtime::LoadNativeObjects(loaded->program->native_objects);
  Counters().hits->Add(1);
  ProvidedExecutable found;
  found.program = loaded->program;
  found.bytes = bytes->size();
  found.neff = *std::move(bytes);
  return found;
}

absl::Status RemoteProvider::Keep(const ExecutableRequest& request, const ProvidedExecutable& found) {
  if (!found.persistent || found.neff.empty() || request.stand_in) return absl::OkStatus();
  absl::Status stored = StoreRemoteEntry(redis_, fleet_key_, request.KeyHex(), found.neff);
  if (stored.ok()) Counters().stores->Add(1);
  // An unreachable Redis was already reported by Get; the executable runs anyway.
  return stored.code() == absl::StatusCode::kUnavailable ? absl::OkStatus() : stored;
}

}  // namespace torch_neuron::cache

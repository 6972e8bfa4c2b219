#include "cache/remote_provider.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/metrics.h"
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

timeval Timeval(double seconds) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisUrl(const std::string& url) {
  constexpr std::string_view kScheme = "redis://";
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "' is not a redis://host[:port][/db] URL"));
  };
  if (url.rfind(kScheme, 0) != 0) return invalid();
  std::string rest = url.substr(kScheme.size());
  RedisAddress address;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(db, &address.db) || address.db < 0)) return invalid();
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &address.port) || address.port <= 0 ||
        address.port > 65535) {
      return invalid();
    }
    rest = rest.substr(0, colon);
  }
  if (!rest.empty()) address.host = rest;
  return address;
}

std::string RemoteKey(const std::string& key_hex) { return absl::StrCat(kRemoteKeyPrefix, key_hex); }

RedisConnection::~RedisConnection() {
  absl::MutexLock lock(&mu_);
  Drop();
}

void RedisConnection::Drop() {
  if (context_ != nullptr) redisFree(static_cast<redisContext*>(context_));
  context_ = nullptr;
}

absl::Status RedisConnection::Connect() {
  if (context_ != nullptr) return absl::OkStatus();
  if (NowNs() < retry_after_ns_) {
    return absl::UnavailableError(
        absl::StrCat("Redis at ", address_.host, ":", address_.port, " was unreachable a moment ago"));
  }
  redisContext* c = redisConnectWithTimeout(address_.host.c_str(), address_.port, Timeval(timeout_s_));
  if (c == nullptr || c->err != 0) {
    const std::string why = c != nullptr ? c->errstr : "out of memory";
    if (c != nullptr) redisFree(c);
    retry_after_ns_ = NowNs() + int64_t{30} * 1000000000;
    return absl::UnavailableError(absl::StrCat("Redis at ", address_.host, ":", address_.port, ": ", why));
  }
  redisSetTimeout(c, Timeval(timeout_s_));
  context_ = c;
  if (address_.db != 0) {
    bool nil = false;
    absl::StatusOr<std::vector<std::string>> selected =
        Command({"SELECT", std::to_string(address_.db)}, &nil);
    if (!selected.ok()) return selected.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RedisConnection::Command(const std::vector<std::string>& args,
                                                                  bool* nil) {
  *nil = false;
  absl::Status connected = Connect();
  if (!connected.ok()) return connected;
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* c = static_cast<redisContext*>(context_);
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  if (reply == nullptr) {
    const std::string why = c->errstr;
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

absl::StatusOr<ProvidedExecutable> RemoteProvider::Get(const ExecutableRequest& request,
                                                       RequestHolds& holds) {
  (void)holds;
  if (request.stand_in) return absl::NotFoundError("stand-ins are not kept in Redis");
  const std::string key = RemoteKey(request.KeyHex());
  absl::StatusOr<std::string> bytes = redis_.Get(key);
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
  absl::Status stored = redis_.Set(RemoteKey(request.KeyHex()), found.neff);
  if (stored.ok()) Counters().stores->Add(1);
  // An unreachable Redis was already reported by Get; the executable runs anyway.
  return stored.code() == absl::StatusCode::kUnavailable ? absl::OkStatus() : stored;
}

}  // namespace torch_neuron::cache

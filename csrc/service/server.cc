#include "service/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/metrics.h"
#include "cache/compile_settings.h"
#include "cache/disk_cache.h"
#include "cache/remote_provider.h"
#include "compiler/compile_request.h"
#include "compiler/fingerprint.h"
#include "compiler/host/host_target.h"
#include "compiler/host/native_build.h"
#include "neff/neff_reader.h"
#include "proto/service.pb.h"
#include "service/framing.h"

namespace torch_neuron::service {
namespace {

void Log(const std::string& line) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  std::fprintf(stderr, "%s [%d] %s\n", stamp, static_cast<int>(::getpid()), line.c_str());
  std::fflush(stderr);
}

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The answer to one compile request, shared by every request for its key.
struct Flight {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::string neff ABSL_GUARDED_BY(mu);
  std::string source ABSL_GUARDED_BY(mu);
};

class Server {
 public:
  explicit Server(const ServerOptions& options) : options_(options), started_(Clock::now()) {
    workers_ = options.workers > 0 ? options.workers
                                   : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    if (!options.cache_dir.empty()) {
      disk_ = std::make_unique<cache::DiskCache>(options.cache_dir, options.cache_max_mb << 20, false);
    }
    kernel_objects_ = cache::MakeKernelObjectCache(options.cache_dir, options.cache_max_mb);
    target_ = std::make_unique<compiler::HostTarget>(options.toolchain, kernel_objects_.get());
  }

  absl::Status Run();

 private:
  void Connection(int fd);
  proto::ServiceReply Handle(const std::string& frame);
  proto::ServiceReply Compile(const proto::ServiceCompile& compile,
                              std::unique_ptr<compiler::RequestGraph> graph);
  proto::ServiceReply Lookup(const proto::ServiceLookup& lookup);
  void CompileFlight(const proto::CompileRequest& request, const compiler::RequestGraph& graph,
                     const compiler::KeyedFingerprint& fingerprint, ir::hash_t key,
                     cache::RedisConnection* redis, const std::string& fleet_key, Flight& flight);
  // The executable stored under `key_hex` on the disk or in Redis (written to
  // the disk when Redis had it, and signed by `fleet_key` when there is one),
  // verified against `fingerprint`; "" if none.
  std::string FindStored(const std::string& key_hex, const proto::CompilerFingerprint& fingerprint,
                         cache::RedisConnection* redis, const std::string& fleet_key, std::string* source);
  // The connection to the Redis at `url` ("" or an invalid URL: none), made
  // once and kept for every client that names it.
  cache::RedisConnection* Redis(const std::string& url);
  proto::ServiceStatus Status();
  bool Idle() {
    absl::MutexLock lock(&mu_);
    const double quiet = std::chrono::duration<double>(Clock::now() - last_request_).count();
    return connections_ == 0 && quiet > options_.idle_s;
  }

  const ServerOptions options_;
  const Clock::time_point started_;
  int workers_ = 1;
  std::unique_ptr<cache::DiskCache> disk_;
  // Kernels shared by different graphs are built once (content-addressed).
  std::unique_ptr<compiler::KernelObjectCache> kernel_objects_;
  std::unique_ptr<compiler::HostTarget> target_;  // builds with kernel_objects_
  std::atomic<bool> stop_{false};

  absl::Mutex mu_;
  int connections_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point last_request_ ABSL_GUARDED_BY(mu_) = Clock::now();
  absl::flat_hash_map<ir::hash_t, std::shared_ptr<Flight>> flights_ ABSL_GUARDED_BY(mu_);
  int busy_workers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::unique_ptr<cache::RedisConnection>> redis_ ABSL_GUARDED_BY(mu_);

  std::atomic<int64_t> requests_{0}, compiles_{0}, joins_{0}, disk_hits_{0}, errors_{0}, refused_{0};
  std::atomic<int64_t> remote_hits_{0}, remote_stores_{0}, remote_corrupt_{0}, lookups_{0};
  std::atomic<int64_t> remote_untrusted_{0};
  std::atomic<bool> redis_warned_{false};
};

proto::ServiceReply ErrorReply(const absl::Status& status) {
  proto::ServiceReply reply;
  reply.set_protocol_version(kProtocolVersion);
  reply.set_code(static_cast<int32_t>(status.code()));
  reply.set_message(std::string(status.message()));
  return reply;
}

absl::Status Server::Run() {
  const std::string socket_path = SocketPath(options_.dir);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("the socket path ", socket_path, " is longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  if (::mkdir(options_.dir.c_str(), 0700) != 0 && errno != EEXIST) return Errno("mkdir " + options_.dir);
  struct stat st {};
  if (::stat(options_.dir.c_str(), &st) != 0) return Errno("stat " + options_.dir);
  if (st.st_uid != ::getuid()) {
    return absl::PermissionDeniedError(absl::StrCat(options_.dir, " belongs to uid ", st.st_uid));
  }
  if ((st.st_mode & 077) != 0 && ::chmod(options_.dir.c_str(), 0700) != 0)
    return Errno("chmod " + options_.dir);

  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return Errno("socket");
  // A live service answers a connect: leave it alone. A stale socket file
  // (its service was killed) is replaced.
  if (::connect(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    ::close(listener);
    return absl::AlreadyExistsError(absl::StrCat("a service is already serving ", socket_path));
  }
  ::unlink(socket_path.c_str());
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::chmod(socket_path.c_str(), 0600) != 0 || ::listen(listener, 128) != 0) {
    const absl::Status s = Errno("bind " + socket_path);
    ::close(listener);
    return s;
  }
  {
    const std::string pid_path = options_.dir + "/pid";
    if (FILE* f = std::fopen(pid_path.c_str(), "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
      std::fclose(f);
    }
  }
  Log(absl::StrCat("serving ", socket_path, " with ", workers_, " compile workers, cache ",
                   options_.cache_dir.empty() ? "off" : options_.cache_dir, ", idle exit after ",
                   options_.idle_s, " s"));
  while (!stop_.load()) {
    pollfd p{listener, POLLIN, 0};
    const int r = ::poll(&p, 1, 200);
    if (r < 0 && errno != EINTR) {
      Log(absl::StrCat("poll: ", std::strerror(errno)));
      break;
    }
    if (r <= 0) {
      if (Idle()) {
        Log("idle: exiting");
        break;
      }
      continue;
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ucred peer{};
    socklen_t len = sizeof(peer);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != ::getuid()) {
      refused_++;
      Log(absl::StrCat("refused a connection from uid ", peer.uid, " (pid ", peer.pid, "): only uid ",
                       ::getuid(), " is served"));
      ::close(fd);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      ++connections_;
    }
    std::thread([this, fd] { Connection(fd); }).detach();
  }
  // Stop taking connections; let the ones being served finish (briefly).
  ::close(listener);
  ::unlink(socket_path.c_str());
  {
    absl::MutexLock lock(&mu_);
    auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return connections_ == 0; };
    mu_.AwaitWithTimeout(absl::Condition(&none), absl::Seconds(30));
    if (connections_ != 0) {
      // Detached threads still use this object: never return under them.
      Log(absl::StrCat(connections_, " connections still open at exit"));
      std::fflush(stderr);
      ::_exit(0);
    }
  }
  Log(absl::StrCat("exiting after ", requests_.load(), " requests, ", compiles_.load(), " compiles"));
  return absl::OkStatus();
}

void Server::Connection(int fd) {
  while (!stop_.load()) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options_.request_timeout_s));
    absl::StatusOr<std::string> frame = ReadFrame(fd, deadline);
    if (!frame.ok()) {
      if (frame.status().code() == absl::StatusCode::kResourceExhausted) {
        errors_++;
        Log(absl::StrCat("refused a request: ", frame.status().message()));
        (void)WriteFrame(fd, ErrorReply(frame.status()).SerializeAsString(),
                         Clock::now() + std::chrono::seconds(5));
      } else if (frame.status().code() != absl::StatusCode::kNotFound) {
        Log(absl::StrCat("dropped a connection: ", frame.status().message()));
      }
      break;
    }
    requests_++;
    {
      absl::MutexLock lock(&mu_);
      last_request_ = Clock::now();
    }
    proto::ServiceReply reply;
    try {
      reply = Handle(*frame);
    } catch (const std::exception& e) {
      reply = ErrorReply(absl::InternalError(absl::StrCat("the service failed: ", e.what())));
    }
    if (reply.code() != 0) errors_++;
    // A client that went away costs nothing more than this write.
    if (!WriteFrame(fd, reply.SerializeAsString(), Clock::now() + std::chrono::seconds(30)).ok()) break;
    absl::MutexLock lock(&mu_);
    last_request_ = Clock::now();
  }
  ::close(fd);
  absl::MutexLock lock(&mu_);
  --connections_;
  last_request_ = Clock::now();
}

proto::ServiceReply Server::Handle(const std::string& frame) {
  absl::StatusOr<ParsedRequest> parsed = ParseServiceRequest(frame);
  if (!parsed.ok()) return ErrorReply(parsed.status());
  const proto::ServiceRequest& request = parsed->message;
  proto::ServiceReply reply;
  reply.set_protocol_version(kProtocolVersion);
  switch (request.body_case()) {
    case proto::ServiceRequest::kCompile:
      return Compile(request.compile(), std::move(parsed->graph));
    case proto::ServiceRequest::kLookup:
      return Lookup(request.lookup());
    case proto::ServiceRequest::kStatus:
      *reply.mutable_status() = Status();
      return reply;
    case proto::ServiceRequest::kShutdown:
      Log("shutdown requested");
      stop_.store(true);
      return reply;
    default:
      return ErrorReply(absl::InvalidArgumentError("malformed request: no body"));
  }
}

proto::ServiceReply Server::Compile(const proto::ServiceCompile& compile,
                                    std::unique_ptr<compiler::RequestGraph> graph) {
  const compiler::KeyedFingerprint& fingerprint = compiler::FingerprintFor(graph->options, *target_);
  if (fingerprint.fingerprint.SerializeAsString() != compile.fingerprint().SerializeAsString()) {
    return ErrorReply(absl::FailedPreconditionError(
        absl::StrCat("the client compiles with ", compiler::FingerprintText(compile.fingerprint()),
                     "; this service with ", compiler::FingerprintText(fingerprint.fingerprint))));
  }
  const ir::hash_t key = compiler::CacheKey(graph->graph.hash, fingerprint.hash);
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Flight>& slot = flights_[key];
    if (slot == nullptr) {
      slot = std::make_shared<Flight>();
      leader = true;
    }
    flight = slot;
  }
  if (leader) {
    CompileFlight(compile.request(), *graph, fingerprint, key, Redis(compile.remote_cache()),
                  compile.remote_cache_key(), *flight);
    absl::MutexLock lock(&mu_);
    flights_.erase(key);
  } else {
    joins_++;
  }
  absl::MutexLock lock(&flight->mu);
  flight->mu.Await(absl::Condition(&flight->done));
  if (!flight->status.ok()) return ErrorReply(flight->status);
  proto::ServiceReply reply;
  reply.set_protocol_version(kProtocolVersion);
  reply.set_neff(flight->neff);
  reply.set_source(leader ? flight->source : "joined");
  return reply;
}

cache::RedisConnection* Server::Redis(const std::string& url) {
  if (url.empty()) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = redis_.find(url);
  if (it == redis_.end()) {
    absl::StatusOr<cache::RedisAddress> address = cache::ParseRedisUrl(url);
    if (!address.ok()) Log(absl::StrCat("no remote cache: ", address.status().message()));
    it = redis_.emplace(url, address.ok() ? std::make_unique<cache::RedisConnection>(*address) : nullptr)
             .first;
  }
  return it->second.get();
}

std::string Server::FindStored(const std::string& key_hex, const proto::CompilerFingerprint& fingerprint,
                               cache::RedisConnection* redis, const std::string& fleet_key,
                               std::string* source) {
  auto validate = [&](std::string_view bytes) { return neff::ReadNeff(bytes, &fingerprint).status(); };
  if (disk_ != nullptr) {
    if (std::optional<std::string> found = disk_->Load(key_hex, validate)) {
      disk_hits_++;
      *source = "disk";
      return *std::move(found);
    }
  }
  if (redis == nullptr) return "";
  const std::string remote_key = cache::RemoteKey(key_hex);
  absl::StatusOr<std::string> bytes = cache::LoadRemoteEntry(*redis, fleet_key, key_hex);
  if (bytes.status().code() == absl::StatusCode::kPermissionDenied) {
    // Never loaded: compiled here, and the signed entry written over it.
    remote_untrusted_++;
    Log(absl::StrCat("refused: ", bytes.status().message()));
    return "";
  }
  if (!bytes.ok()) {
    // A miss, or a Redis that cannot answer (logged once): compile without it.
    if (bytes.status().code() != absl::StatusCode::kNotFound && !redis_warned_.exchange(true)) {
      Log(absl::StrCat("the remote cache is unavailable: ", bytes.status().message()));
    }
    return "";
  }
  if (absl::Status valid = validate(*bytes); !valid.ok()) {
    remote_corrupt_++;
    Log(absl::StrCat("deleted the corrupt remote entry ", remote_key, ": ", valid.message()));
    (void)redis->Delete(remote_key);
    return "";
  }
  remote_hits_++;
  *source = "remote";
  if (disk_ != nullptr) {
    absl::Status stored = disk_->Store(key_hex, *bytes);
    if (!stored.ok()) Log(absl::StrCat("could not write ", key_hex, ": ", stored.message()));
  }
  return *std::move(bytes);
}

proto::ServiceReply Server::Lookup(const proto::ServiceLookup& lookup) {
  lookups_++;
  std::string source;
  std::string neff = FindStored(lookup.key(), lookup.fingerprint(), Redis(lookup.remote_cache()),
                                lookup.remote_cache_key(), &source);
  if (neff.empty())
    return ErrorReply(absl::NotFoundError(absl::StrCat("no stored executable for ", lookup.key())));
  proto::ServiceReply reply;
  reply.set_protocol_version(kProtocolVersion);
  reply.set_neff(std::move(neff));
  reply.set_source(source);
  return reply;
}

void Server::CompileFlight(const proto::CompileRequest& request, const compiler::RequestGraph& graph,
                           const compiler::KeyedFingerprint& fingerprint, ir::hash_t key,
                           cache::RedisConnection* redis, const std::string& fleet_key, Flight& flight) {
  absl::Status status;
  std::string source;
  const std::string key_hex = ir::HashToHex(key);
  std::string neff = FindStored(key_hex, fingerprint.fingerprint, redis, fleet_key, &source);
  if (source.empty()) {
    {
      absl::MutexLock lock(&mu_);
      ++queued_;
      auto free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_workers_ < workers_; };
      mu_.Await(absl::Condition(&free));
      --queued_;
      ++busy_workers_;
    }
    if (options_.test_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.test_delay_ms));
    try {
      absl::StatusOr<compiler::CompileResult> result = compiler::Compile(request, graph.options, *target_);
      if (!result.ok()) {
        status = result.status();
      } else if (!result->tier1_error.empty()) {
        // A tier-0 fallback must not take the tier-1 key: the client compiles
        // (and reports the toolchain's error) itself.
        status = absl::UnavailableError(absl::StrCat("tier 1 did not build here: ", result->tier1_error));
      } else {
        neff = std::move(result->neff);
        source = "compiled";
        compiles_++;
        if (disk_ != nullptr) {
          absl::Status stored = disk_->Store(key_hex, neff);
          if (!stored.ok()) Log(absl::StrCat("could not write ", key_hex, ": ", stored.message()));
        }
        if (redis != nullptr && cache::StoreRemoteEntry(*redis, fleet_key, key_hex, neff).ok())
          remote_stores_++;
      }
    } catch (const std::exception& e) {
      status = absl::InvalidArgumentError(absl::StrCat("the compile failed: ", e.what()));
    }
    absl::MutexLock lock(&mu_);
    --busy_workers_;
  }
  absl::MutexLock lock(&flight.mu);
  flight.status = status;
  flight.neff = std::move(neff);
  flight.source = std::move(source);
  flight.done = true;
}

proto::ServiceStatus Server::Status() {
  proto::ServiceStatus s;
  s.set_pid(::getpid());
  s.set_uptime_s(std::chrono::duration<double>(Clock::now() - started_).count());
  s.set_requests(requests_.load());
  s.set_compiles(compiles_.load());
  s.set_joins(joins_.load());
  s.set_disk_hits(disk_hits_.load());
  s.set_errors(errors_.load());
  s.set_refused_peers(refused_.load());
  s.set_workers(workers_);
  s.set_kernel_builds(metrics::GetCounter("compile.kernel.build.count")->Value());
  s.set_kernel_reuses(metrics::GetCounter("compile.kernel.reuse.count")->Value());
  s.set_remote_hits(remote_hits_.load());
  s.set_remote_stores(remote_stores_.load());
  s.set_remote_corrupt(remote_corrupt_.load());
  s.set_remote_untrusted(remote_untrusted_.load());
  s.set_lookups(lookups_.load());
  absl::MutexLock lock(&mu_);
  s.set_queue_length(queued_);
  s.set_in_flight(static_cast<int64_t>(flights_.size()));
  return s;
}

}  // namespace

absl::StatusOr<ParsedRequest> ParseServiceRequest(std::string_view frame) {
  ParsedRequest parsed;
  if (!parsed.message.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return absl::InvalidArgumentError("malformed request: not a ServiceRequest message");
  }
  if (parsed.message.protocol_version() != kProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrCat("protocol version ", parsed.message.protocol_version(),
                                                   " (this service speaks ", kProtocolVersion, ")"));
  }
  switch (parsed.message.body_case()) {
    case proto::ServiceRequest::kCompile: {
      absl::StatusOr<std::unique_ptr<compiler::RequestGraph>> graph =
          compiler::ReadCompileRequest(parsed.message.compile().request());
      if (!graph.ok()) return graph.status();
      parsed.graph = *std::move(graph);
      break;
    }
    case proto::ServiceRequest::kLookup: {
      const std::string& key = parsed.message.lookup().key();
      if (key.size() != 32 || key.find_first_not_of("0123456789abcdef") != std::string::npos) {
        return absl::InvalidArgumentError("malformed request: a lookup key is 32 lowercase hex digits");
      }
      break;
    }
    case proto::ServiceRequest::kStatus:
    case proto::ServiceRequest::kShutdown:
      break;
    default:
      return absl::InvalidArgumentError("malformed request: no body");
  }
  return parsed;
}

absl::Status Serve(const ServerOptions& options) {
  Server server(options);
  return server.Run();
}

}  // namespace torch_neuron::service

#include "service/client.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "base/owned_file.h"
#include "c10/util/Exception.h"
#include "cache/disk_cache.h"
#include "compiler/fingerprint.h"
#include "compiler/host/host_target.h"
#include "neff/neff_reader.h"
#include "runtime/native_library.h"

extern char** environ;

namespace torch_neuron::service {
namespace {

struct ClientMetrics {
  metrics::Counter* answered = metrics::GetCounter("service.compile.count");
  metrics::Counter* fallbacks = metrics::GetCounter("service.fallback.count");
  metrics::Counter* unreachable = metrics::GetCounter("service.fallback.unreachable.count");
  metrics::Counter* timeouts = metrics::GetCounter("service.fallback.timeout.count");
  metrics::Counter* errors = metrics::GetCounter("service.fallback.error.count");
  metrics::Counter* starts = metrics::GetCounter("service.start.count");
  metrics::Counter* lookups = metrics::GetCounter("service.lookup_hit.count");
  metrics::Counter* untrusted = metrics::GetCounter("service.untrusted.count");
};

const ClientMetrics& Counters() {
  static const ClientMetrics* counters = new ClientMetrics();
  return *counters;
}

absl::Mutex state_mu(absl::kConstInit);
std::vector<std::string>* launcher ABSL_GUARDED_BY(state_mu) = nullptr;
std::string* last_fallback ABSL_GUARDED_BY(state_mu) = nullptr;
// After a service failed to start, auto mode does not try again before this
// (every compile would otherwise wait for a start that fails).
Clock::time_point no_start_before ABSL_GUARDED_BY(state_mu);

// Whether the socket at `path` may be trusted to answer with code: its
// directory is this user's alone, the socket file is this user's, and (checked
// after connecting) the process serving it runs as this user. PERMISSION_DENIED
// otherwise, counted and warned once.
absl::Status Untrusted(const absl::Status& why) {
  Counters().untrusted->Add(1);
  TORCH_WARN_ONCE("torch_neuron: not using the compile service (", why.message(),
                  "); graphs are compiled in this process. service.untrusted.count counts these.");
  return absl::PermissionDeniedError(absl::StrCat("untrusted compile service: ", why.message()));
}

absl::Status CheckSocketPlace(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  // Nothing there yet: the connect says so, in its own words.
  absl::Status dir_ok = CheckOwnedDirectory(dir);
  if (dir_ok.code() == absl::StatusCode::kNotFound) return absl::OkStatus();
  if (!dir_ok.ok()) return Untrusted(dir_ok);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (st.st_uid != ::geteuid()) {
    return Untrusted(absl::PermissionDeniedError(absl::StrCat(path, " belongs to uid ", st.st_uid)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ConnectTo(const std::string& path) {
  if (absl::Status place = CheckSocketPlace(path); !place.ok()) return place;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::UnavailableError(absl::StrCat("the socket path ", path, " is too long"));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("no service at ", path, ": ", std::strerror(err)));
  }
  // The check above and the connect are not one step: the peer's credentials
  // say who actually answers.
  ucred peer{};
  socklen_t length = sizeof(peer);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != ::geteuid()) {
    ::close(fd);
    return Untrusted(
        absl::PermissionDeniedError(absl::StrCat("the service at ", path, " runs as uid ", peer.uid)));
  }
  return fd;
}

// Starts `python -m torch_neuron.service serve` for `dir`, detached in its own
// session, its output appended to dir/service.log.
absl::Status Launch(const ClientOptions& options, const std::string& dir) {
  std::vector<std::string> argv;
  {
    absl::MutexLock lock(&state_mu);
    if (launcher != nullptr) argv = *launcher;
  }
  if (argv.empty())
    return absl::UnavailableError("no way to start a compile service (torch_neuron not imported)");
  argv.insert(argv.end(), {"--dir", dir, "--cache-dir", options.cache_dir});
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const std::string log = dir + "/service.log";
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  // The service compiles for others and never asks a service itself.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "TORCH_NEURON_COMPILE_SERVICE=")) env_strings.emplace_back(*e);
  }
  env_strings.emplace_back("TORCH_NEURON_COMPILE_SERVICE=off");
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return absl::UnavailableError(absl::StrCat("could not start ", args[0], ": ", std::strerror(rc)));
  Counters().starts->Add(1);
  // Reap it if it exits early (it normally outlives this process: init reaps it then).
  std::thread([pid] {
    int status = 0;
    ::waitpid(pid, &status, 0);
  }).detach();
  return absl::OkStatus();
}

void NoteFallback(const absl::Status& why, metrics::Counter* reason) {
  Counters().fallbacks->Add(1);
  reason->Add(1);
  absl::MutexLock lock(&state_mu);
  if (last_fallback == nullptr) last_fallback = new std::string();
  *last_fallback = std::string(why.message());
}

}  // namespace

ClientOptions ClientOptionsFor(const CacheConfig& config, const std::string& toolchain) {
  ClientOptions options;
  options.mode = config.compile_service;
  options.cache_dir = config.dir.empty() ? cache::DefaultCacheDir() : config.dir;
  options.toolchain = toolchain;
  options.timeout_s = config.service_timeout_s;
  options.remote_cache = config.remote_cache;
  options.remote_cache_key = config.remote_cache_key;
  return options;
}

cache::ServiceLevel ServiceLevelFor(const CacheConfig& config, const std::string& toolchain) {
  return [options = ClientOptionsFor(config, toolchain)](std::unique_ptr<cache::ExecutableProvider> remote) {
    ClientOptions level = options;
    // An address the process could not use is not passed on either.
    if (remote == nullptr) level.remote_cache.clear();
    return std::make_unique<ServiceProvider>(std::move(level), std::move(remote));
  };
}

std::string ServiceDirFor(const ClientOptions& options) {
  if (options.mode != "auto") {
    const size_t slash = options.mode.rfind('/');
    return slash == std::string::npos ? "." : options.mode.substr(0, slash);
  }
  compiler::CompileOptions identity;
  identity.opt_level = 1;
  const compiler::HostTarget target(options.toolchain);
  const std::string hex = ir::HashToHex(compiler::FingerprintFor(identity, target).hash);
  const std::string root = options.cache_dir.empty() ? cache::DefaultCacheDir() : options.cache_dir;
  return ServiceDir(root, hex.substr(0, 16));
}

std::string SocketFor(const ClientOptions& options) {
  return options.mode == "auto" ? SocketPath(ServiceDirFor(options)) : options.mode;
}

void SetLauncher(std::vector<std::string> argv) {
  absl::MutexLock lock(&state_mu);
  if (launcher == nullptr) launcher = new std::vector<std::string>();
  *launcher = std::move(argv);
}

std::string LastFallbackReason() {
  absl::MutexLock lock(&state_mu);
  return last_fallback == nullptr ? "" : *last_fallback;
}

absl::StatusOr<int> Connect(const ClientOptions& options, bool start_if_needed) {
  const std::string socket = SocketFor(options);
  absl::StatusOr<int> fd = ConnectTo(socket);
  // An untrusted place is not ours to start a service in either: compile here.
  if (fd.status().code() == absl::StatusCode::kPermissionDenied)
    return absl::UnavailableError(fd.status().message());
  if (fd.ok() || options.mode != "auto" || !start_if_needed) return fd;
  {
    absl::MutexLock lock(&state_mu);
    if (Clock::now() < no_start_before) return fd;
  }
  // One client starts the service: the others wait on the lock and find it.
  const std::string dir = ServiceDirFor(options);
  const std::string root = dir.substr(0, dir.rfind('/'));
  ::mkdir(root.c_str(), 0700);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
  }
  const int lock_fd = ::open((dir + "/start.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0)
    return absl::UnavailableError(absl::StrCat("open ", dir, "/start.lock: ", std::strerror(errno)));
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (Clock::now() > give_up) {
      ::close(lock_fd);
      return absl::UnavailableError("timed out waiting for another client starting the service");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  fd = ConnectTo(socket);
  if (!fd.ok()) {
    absl::Status launched = Launch(options, dir);
    while (launched.ok() && !fd.ok() && fd.status().code() != absl::StatusCode::kPermissionDenied &&
           Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      fd = ConnectTo(socket);
    }
    if (!fd.ok()) {
      absl::MutexLock lock(&state_mu);
      no_start_before = Clock::now() + std::chrono::seconds(60);
    }
    if (!launched.ok()) fd = launched;
  }
  ::flock(lock_fd, LOCK_UN);
  ::close(lock_fd);
  if (fd.status().code() == absl::StatusCode::kPermissionDenied)
    return absl::UnavailableError(fd.status().message());
  return fd;
}

void StartInBackground(const ClientOptions& options) {
  if (options.mode != "auto") return;
  std::thread([options] {
    absl::StatusOr<int> fd = Connect(options, /*start_if_needed=*/true);
    if (fd.ok()) ::close(*fd);
  }).detach();
}

absl::StatusOr<proto::ServiceReply> Call(const ClientOptions& options, const proto::ServiceRequest& request,
                                         bool start_if_needed, double timeout_s) {
  absl::StatusOr<int> fd = Connect(options, start_if_needed);
  if (!fd.ok()) return fd.status();
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  absl::Status sent = WriteFrame(*fd, request.SerializeAsString(), deadline);
  absl::StatusOr<std::string> frame =
      sent.ok() ? ReadFrame(*fd, deadline) : absl::StatusOr<std::string>(sent);
  ::close(*fd);
  if (!frame.ok()) {
    if (frame.status().code() == absl::StatusCode::kNotFound) {
      return absl::UnavailableError("the service closed the connection without a reply");
    }
    return absl::UnavailableError(absl::StrCat("no reply from the service: ", frame.status().message()));
  }
  proto::ServiceReply reply;
  if (!reply.ParseFromString(*frame)) return absl::UnavailableError("the service's reply is malformed");
  return reply;
}

namespace {

// The executable of a reply's NEFF, read (and verified against the client's
// fingerprint) as any NEFF is; UNAVAILABLE for one the reader refuses.
absl::StatusOr<cache::ProvidedExecutable> LoadReply(const proto::ServiceReply& reply,
                                                    const proto::CompilerFingerprint* fingerprint) {
  absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(reply.neff(), fingerprint);
  if (!loaded.ok()) {
    return absl::UnavailableError(absl::StrCat("the service's NEFF: ", loaded.status().message()));
  }
  runtime::LoadNativeObjects(loaded->program->native_objects);
  cache::ProvidedExecutable found;
  found.program = loaded->program;
  found.bytes = reply.neff().size();
  found.neff = reply.neff();
  return found;
}

}  // namespace

absl::StatusOr<cache::ProvidedExecutable> ServiceProvider::Get(const cache::ExecutableRequest& request,
                                                               cache::RequestHolds& holds) {
  if (request.stand_in) return absl::NotFoundError("the service provides stored tier-1 executables only");
  absl::StatusOr<cache::ProvidedExecutable> found = AskService(request);
  if (found.status().code() != absl::StatusCode::kUnavailable || direct_remote_ == nullptr) return found;
  // No service to ask: the remote level is asked from here.
  absl::StatusOr<cache::ProvidedExecutable> remote = direct_remote_->Get(request, holds);
  if (remote.ok() || remote.status().code() != absl::StatusCode::kNotFound) return remote;
  return found;  // UNAVAILABLE: the chain compiles here (and Keep writes the remote level)
}

absl::Status ServiceProvider::Keep(const cache::ExecutableRequest& request,
                                   const cache::ProvidedExecutable& found) {
  return direct_remote_ != nullptr ? direct_remote_->Keep(request, found) : absl::OkStatus();
}

absl::StatusOr<cache::ProvidedExecutable> ServiceProvider::AskService(
    const cache::ExecutableRequest& request) {
  if (request.fingerprint == nullptr) return absl::NotFoundError("no fingerprint");
  proto::ServiceRequest message;
  message.set_protocol_version(kProtocolVersion);
  if (request.stored_only) {
    // A lookup: the key, not the graph. Not a fallback when no service answers
    // (nothing was to be compiled); a service is not started for it.
    proto::ServiceLookup& lookup = *message.mutable_lookup();
    lookup.set_key(request.KeyHex());
    *lookup.mutable_fingerprint() = *request.fingerprint;
    lookup.set_remote_cache(options_.remote_cache);
    lookup.set_remote_cache_key(options_.remote_cache_key);
    absl::StatusOr<proto::ServiceReply> reply =
        Call(options_, message, /*start_if_needed=*/false, options_.timeout_s);
    if (!reply.ok()) return absl::UnavailableError(reply.status().message());
    if (reply->code() == static_cast<int32_t>(absl::StatusCode::kNotFound)) {
      return absl::NotFoundError(reply->message());
    }
    if (reply->code() != 0) return absl::UnavailableError(absl::StrCat("the service: ", reply->message()));
    absl::StatusOr<cache::ProvidedExecutable> found = LoadReply(*reply, request.fingerprint);
    if (found.ok()) Counters().lookups->Add(1);
    return found;
  }
  if (request.compile == nullptr) return absl::NotFoundError("no graph");
  *message.mutable_compile()->mutable_request() = *request.compile;
  *message.mutable_compile()->mutable_fingerprint() = *request.fingerprint;
  message.mutable_compile()->set_remote_cache(options_.remote_cache);
  message.mutable_compile()->set_remote_cache_key(options_.remote_cache_key);
  absl::StatusOr<proto::ServiceReply> reply =
      Call(options_, message, /*start_if_needed=*/true, options_.timeout_s);
  if (!reply.ok()) {
    const bool timeout = absl::StrContains(reply.status().message(), "timed out");
    NoteFallback(reply.status(), timeout ? Counters().timeouts : Counters().unreachable);
    return absl::UnavailableError(reply.status().message());
  }
  if (reply->code() != 0) {
    const absl::Status error(static_cast<absl::StatusCode>(reply->code()), reply->message());
    NoteFallback(error, Counters().errors);
    return absl::UnavailableError(absl::StrCat("the service: ", reply->message()));
  }
  absl::StatusOr<cache::ProvidedExecutable> found = LoadReply(*reply, request.fingerprint);
  if (!found.ok()) {
    NoteFallback(found.status(), Counters().errors);
    return found;
  }
  Counters().answered->Add(1);
  return found;
}

}  // namespace torch_neuron::service

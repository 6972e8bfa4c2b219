#include "cache/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "base/owned_file.h"
#include "c10/util/Exception.h"

namespace torch_neuron::cache {
namespace fs = std::filesystem;

namespace {

const std::string kEntrySuffix = ".neff";
const std::string kLockSuffix = ".lock";
const std::string kTempMarker = ".tmp.";

absl::Status ErrnoStatus(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

bool ValidKey(std::string_view key) {
  return key.size() == 32 && std::all_of(key.begin(), key.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Writes all of `bytes` to fd; false on error.
bool WriteAll(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

// A shard directory's name: two lowercase hex digits (EntryPath's layout).
bool IsShardName(const char* name) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  return hex(name[0]) && hex(name[1]) && name[2] == '\0';
}

// Calls visit(dir, dir_fd, name) for every name in the shard directories
// <root>/ab/cd/, the only places entries and their temporary files are written
// (quarantine/ and anything else is not visited). One readdir pass that builds
// no path per file: a large cache holds tens of thousands of entries and as
// many lock files, and a writer scans it in its first store.
void ForEachShardFile(const std::string& root,
                      absl::FunctionRef<void(const std::string& dir, int dir_fd, const char* name)> visit) {
  DIR* top = ::opendir(root.c_str());
  if (top == nullptr) return;
  while (const dirent* a = ::readdir(top)) {
    if (!IsShardName(a->d_name)) continue;
    const std::string outer = absl::StrCat(root, "/", a->d_name);
    DIR* mid = ::opendir(outer.c_str());
    if (mid == nullptr) continue;
    while (const dirent* b = ::readdir(mid)) {
      if (!IsShardName(b->d_name)) continue;
      const std::string dir = absl::StrCat(outer, "/", b->d_name);
      DIR* leaf = ::opendir(dir.c_str());
      if (leaf == nullptr) continue;
      const int fd = ::dirfd(leaf);
      while (const dirent* f = ::readdir(leaf)) {
        if (std::strcmp(f->d_name, ".") != 0 && std::strcmp(f->d_name, "..") != 0) visit(dir, fd, f->d_name);
      }
      ::closedir(leaf);
    }
    ::closedir(mid);
  }
  ::closedir(top);
}

// A key's file name: <32 hex digits><suffix> (an entry's, a lock's).
bool IsKeyName(std::string_view name, std::string_view suffix) {
  return name.size() == 32 + suffix.size() && name.substr(32) == suffix && ValidKey(name.substr(0, 32));
}

// What a scan finds besides the entries (Prune's cleaning).
struct Leftovers {
  std::vector<std::string> stale_temps;  // temporary files not written for an hour
  std::vector<std::string> locks;        // lock files (<key>.lock)
};

// The entries, oldest first; with `leftovers`, also the temporary files not
// written for an hour (their writers died mid-write) and the lock files.
std::vector<DiskEntry> ScanEntries(const std::string& root, Leftovers* leftovers) {
  std::vector<DiskEntry> entries;
  const int64_t stale_before = static_cast<int64_t>(std::time(nullptr)) - 3600;
  ForEachShardFile(root, [&](const std::string& dir, int dir_fd, const char* name) {
    const std::string_view n(name);
    struct stat st;
    auto regular = [&] { return ::fstatat(dir_fd, name, &st, 0) == 0 && S_ISREG(st.st_mode); };
    if (IsKeyName(n, kEntrySuffix)) {
      if (regular()) {
        entries.push_back({std::string(n.substr(0, 32)), absl::StrCat(dir, "/", name),
                           static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtime)});
      }
    } else if (leftovers == nullptr) {
      return;
    } else if (IsKeyName(n, kLockSuffix)) {
      leftovers->locks.push_back(absl::StrCat(dir, "/", name));  // no stat
    } else if (n.find(kTempMarker) != std::string_view::npos && regular() &&
               static_cast<int64_t>(st.st_mtime) < stale_before) {
      leftovers->stale_temps.push_back(absl::StrCat(dir, "/", name));
    }
  });
  std::sort(entries.begin(), entries.end(),
            [](const DiskEntry& a, const DiskEntry& b) { return a.mtime_seconds < b.mtime_seconds; });
  return entries;
}

void SyncDirectory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

std::string DefaultCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/torch_neuron");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : "/tmp", "/.cache/torch_neuron");
}

DiskCache::DiskCache(std::string root, int64_t max_bytes, bool read_only)
    : root_(std::move(root) + "/v1"), max_bytes_(max_bytes), read_only_(read_only) {}

std::string DiskCache::EntryPath(const std::string& key) const {
  return absl::StrCat(root_, "/", key.substr(0, 2), "/", key.substr(2, 2), "/", key, kEntrySuffix);
}

std::string DiskCache::QuarantineDir() const { return root_ + "/quarantine"; }

std::optional<std::string> DiskCache::Load(const std::string& key,
                                           const std::function<absl::Status(std::string_view)>& validate) {
  if (!ValidKey(key)) return std::nullopt;
  const std::string path = EntryPath(key);
  absl::StatusOr<std::string> read = ReadOwnedFile(path);
  if (read.status().code() == absl::StatusCode::kPermissionDenied) {
    // Code another user could have written: never loaded, left where it is
    // (it is not ours to move); the caller compiles and writes its own entry.
    metrics::Increment("cache.untrusted.count");
    TORCH_WARN_ONCE("torch_neuron: refused a disk cache entry (", read.status().message(),
                    "); graphs it would have given are compiled here. cache.untrusted.count counts them.");
    return std::nullopt;
  }
  if (!read.ok()) return std::nullopt;
  std::string bytes = *std::move(read);
  absl::Status valid = validate(bytes);
  if (!valid.ok()) {
    metrics::Increment("cache.corrupt.count");
    std::error_code ec;
    fs::create_directories(QuarantineDir(), ec);
    const auto stamp = std::chrono::system_clock::now().time_since_epoch().count();
    fs::rename(path, absl::StrCat(QuarantineDir(), "/", key, "-", stamp, kEntrySuffix), ec);
    if (ec) fs::remove(path, ec);  // cannot move it aside: at least stop reading it
    return std::nullopt;
  }
  // Recently used: eviction removes the oldest mtime first.
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return bytes;
}

absl::Status DiskCache::Store(const std::string& key, std::string_view bytes) {
  if (read_only_) return absl::OkStatus();
  if (!ValidKey(key)) return absl::InvalidArgumentError(absl::StrCat("bad cache key '", key, "'"));
  const fs::path path = EntryPath(key);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("cannot create ", path.parent_path().string(), ": ", ec.message()));
  std::random_device rd;
  const std::string temp = absl::StrCat(path.string(), kTempMarker, ::getpid(), ".", rd());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", temp);
  // 0644 whatever the umask: Load refuses an entry its group may write.
  const bool ok = ::fchmod(fd, 0644) == 0 && WriteAll(fd, bytes) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoStatus("cannot write", path.string());
    ::unlink(temp.c_str());
    return status;
  }
  SyncDirectory(path.parent_path());
  metrics::Increment("cache.write.count");
  if (max_bytes_ > 0 && PruneDue(static_cast<int64_t>(bytes.size()))) return Prune();
  return absl::OkStatus();
}

bool DiskCache::PruneDue(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (known_bytes_ < 0) return true;
  known_bytes_ += bytes;
  return known_bytes_ > max_bytes_ || ++stores_since_scan_ >= kStoresPerScan;
}

DiskCache::KeyLock::~KeyLock() {
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

absl::StatusOr<std::unique_ptr<DiskCache::KeyLock>> DiskCache::LockKey(const std::string& key,
                                                                       double timeout_seconds) {
  if (read_only_) return absl::UnavailableError("the cache is read-only");
  if (!ValidKey(key)) return absl::InvalidArgumentError(absl::StrCat("bad cache key '", key, "'"));
  const fs::path path = fs::path(EntryPath(key)).replace_extension(kLockSuffix);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("cannot open lock", path.string());
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        absl::Status status = ErrnoStatus("cannot lock", path.string());
        ::close(fd);
        return status;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::close(fd);
        return absl::UnavailableError(absl::StrCat("timed out waiting for ", path.string()));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    // Prune removes a lock file nobody holds; a waiter that opened it before
    // then has locked a file no longer at the path, which a newcomer may have
    // created again and locked: the lock counts only if the path still names
    // the file locked.
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      return std::make_unique<KeyLock>(fd);
    }
    ::close(fd);
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("timed out waiting for ", path.string()));
    }
  }
}

std::vector<DiskEntry> DiskCache::List() const { return ScanEntries(root_, nullptr); }

absl::Status DiskCache::Prune() {
  if (read_only_) return absl::OkStatus();
  Leftovers leftovers;
  std::vector<DiskEntry> entries = ScanEntries(root_, &leftovers);
  std::error_code ec;
  for (const std::string& temp : leftovers.stale_temps) fs::remove(temp, ec);
  metrics::Increment("cache.scan.count");
  int64_t total = 0;
  for (const DiskEntry& e : entries) total += e.bytes;
  size_t evicted = 0;  // entries[0, evicted) are gone
  for (; evicted < entries.size() && max_bytes_ > 0 && total > max_bytes_; ++evicted) {
    if (fs::remove(entries[evicted].path, ec)) {
      total -= entries[evicted].bytes;
      metrics::Increment("cache.evict.count");
    }
  }
  // Every key ever compiled left a lock file; one whose entry is gone (evicted,
  // never written) goes too, unless someone holds it (LockKey re-checks that
  // the file it locked is still the one at the path).
  std::vector<std::string_view> kept;
  for (size_t i = evicted; i < entries.size(); ++i) kept.push_back(entries[i].key);
  std::sort(kept.begin(), kept.end());
  for (const std::string& path : leftovers.locks) {
    const std::string_view key = std::string_view(path).substr(path.size() - kLockSuffix.size() - 32, 32);
    if (std::binary_search(kept.begin(), kept.end(), key)) continue;
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if (::unlink(path.c_str()) == 0) metrics::Increment("cache.lock_removed.count");
    }
    ::close(fd);
  }
  absl::MutexLock lock(&mu_);
  known_bytes_ = total;
  stores_since_scan_ = 0;
  return absl::OkStatus();
}

absl::Status DiskCache::Clear() {
  if (read_only_) return absl::FailedPreconditionError("the cache is read-only");
  std::error_code ec;
  fs::remove_all(root_, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot remove ", root_, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace torch_neuron::cache

// DiskCache: the second cache level, NEFF files in a directory that any number
// of processes share.
//
//   <root>/v1/ab/cd/<key>.neff     entries (key = 32 hex digits)
//   <root>/v1/ab/cd/<key>.lock     per-key lock files (flock)
//   <root>/v1/quarantine/          entries that failed validation, moved aside
//
// Writes go to a temporary file in the entry's directory, are fsynced and
// renamed into place, so a reader sees a whole file or none. Every read is
// validated by the caller's check (checksum, fingerprint, structure); a corrupt
// or truncated entry is moved to quarantine/, counted, and reported as a miss so
// the caller rebuilds it. An entry that is not this user's alone (another
// uid's, writable by group or others, a link: base/owned_file.h) is never read:
// counted in cache.untrusted.count, warned once, and reported as a miss.
// Entries are written 0644 whatever the umask. Size is bounded: Prune removes the least recently
// used entries (by mtime, refreshed on every hit). A scan of the directory costs
// a stat per entry, so a write prunes only when it may have crossed the bound:
// on this object's first write, when the size it knows of (its last scan plus
// its own writes since) exceeds the bound, and every kStoresPerScan writes
// (for other processes' writes).
//
// Single-flight across processes: LockKey takes an flock on the key's lock file.
// The kernel releases it when the holder exits or is killed, so a dead holder
// never blocks others (nothing waits for a timeout to notice). Prune removes
// the lock files of entries that are gone when nobody holds them; a waiter
// that locked such a file after its removal sees that the path names another
// file (or none) and starts over, so a key is never held twice.
//
// Thread-safe: the size estimate is behind a mutex; per-key locks are advisory
// locks of open file descriptions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::cache {

struct DiskEntry {
  std::string key;
  std::string path;
  int64_t bytes = 0;
  int64_t mtime_seconds = 0;
};

class DiskCache {
 public:
  DiskCache(std::string root, int64_t max_bytes, bool read_only);

  // Writes between two scans of the directory by Store (see above).
  static constexpr int kStoresPerScan = 256;

  const std::string& root() const { return root_; }
  bool read_only() const { return read_only_; }

  // The entry's bytes if present and `validate` accepts them. A rejected entry
  // is quarantined (and counted in cache.corrupt.count) and nullopt returned.
  std::optional<std::string> Load(const std::string& key,
                                  const std::function<absl::Status(std::string_view)>& validate);

  // Writes the entry atomically; a no-op in read-only mode.
  absl::Status Store(const std::string& key, std::string_view bytes);

  // An exclusive cross-process lock on `key`, released by destroying it (or by
  // the process dying).
  class KeyLock {
   public:
    explicit KeyLock(int fd) : fd_(fd) {}
    ~KeyLock();
    KeyLock(const KeyLock&) = delete;
    KeyLock& operator=(const KeyLock&) = delete;

   private:
    int fd_;
  };
  // Waits up to `timeout_seconds` for the lock; UNAVAILABLE after that (the
  // caller then compiles without it), or in read-only mode.
  absl::StatusOr<std::unique_ptr<KeyLock>> LockKey(const std::string& key, double timeout_seconds);

  // Every entry, oldest first.
  std::vector<DiskEntry> List() const;

  // Removes least recently used entries until the total is within the bound,
  // temporary files older than an hour (left by killed writers), and the lock
  // files nobody holds of entries that are gone (cache.lock_removed.count).
  // Counts the scan in cache.scan.count.
  absl::Status Prune();

  // Removes every entry, lock file and quarantined file.
  absl::Status Clear();

  std::string EntryPath(const std::string& key) const;
  std::string QuarantineDir() const;

 private:
  // Whether a write of `bytes` may have crossed the bound (see above).
  bool PruneDue(int64_t bytes);

  std::string root_;  // <root>/v1
  int64_t max_bytes_;
  bool read_only_;
  absl::Mutex mu_;
  int64_t known_bytes_ ABSL_GUARDED_BY(mu_) = -1;  // -1: never scanned
  int stores_since_scan_ ABSL_GUARDED_BY(mu_) = 0;
};

// The directory used when TORCH_NEURON_CACHE_DIR is not set:
// $XDG_CACHE_HOME/torch_neuron, else ~/.cache/torch_neuron.
std::string DefaultCacheDir();

}  // namespace torch_neuron::cache

// DeviceArena: the memory of one emulated neuron device.
//
// The device's memory is a separate region of host memory with its own limit,
// handed out by a caching allocator: freed blocks are kept and reused for later
// requests of a similar size instead of being returned to the host, as on a real
// accelerator where raw allocation is slow. When a request would cross the limit
// the arena first releases its cached blocks and retries; if it still does not fit
// the request fails with RESOURCE_EXHAUSTED naming the sizes, and the arena stays
// usable.
//
// Knows nothing of torch (the c10::Allocator adapter is neuron_allocator.h).
// Thread-safe: every member behind mu_.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::runtime {

struct ArenaStats {
  int64_t allocated_bytes = 0;       // bytes in blocks held by tensors now
  int64_t peak_allocated_bytes = 0;  // since the last ResetPeakStats
  int64_t reserved_bytes = 0;        // allocated + cached, taken from the host
  int64_t peak_reserved_bytes = 0;
  int64_t active_blocks = 0;  // blocks held by tensors now
  int64_t cached_blocks = 0;  // freed blocks kept for reuse
  int64_t num_allocs = 0;     // successful Allocate calls
  int64_t num_frees = 0;
  int64_t num_cache_hits = 0;   // Allocate served from a cached block
  int64_t num_host_allocs = 0;  // blocks taken from the host
  int64_t num_host_frees = 0;   // blocks given back to the host
  int64_t num_ooms = 0;         // requests refused for the limit
  int64_t limit_bytes = 0;      // 0 = unlimited
};

class DeviceArena {
 public:
  // Blocks are multiples of this, so near-equal requests share cached blocks.
  static constexpr size_t kBlockRound = 512;
  // Every block is aligned like this (wide enough for any vector load).
  static constexpr size_t kAlignment = 64;

  DeviceArena(int device_index, int64_t limit_bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A block of at least `nbytes` (> 0). RESOURCE_EXHAUSTED past the limit.
  absl::StatusOr<void*> Allocate(size_t nbytes);

  // Returns `ptr` (from Allocate on this arena) to the cache. False if the
  // pointer is not a live block of this arena.
  bool Free(void* ptr);

  // True if `ptr` is the start of a live block of this arena.
  bool Owns(const void* ptr) const;

  // Size of the live block starting at `ptr`, 0 if none.
  size_t BlockSize(const void* ptr) const;

  // Gives every cached block back to the host.
  void EmptyCache();

  ArenaStats Stats() const;
  void ResetPeakStats();
  // Zeroes the counts (allocations, frees, cache hits, host calls, OOMs).
  void ResetAccumulatedStats();
  void SetLimit(int64_t limit_bytes);
  int device_index() const { return device_index_; }

  static size_t RoundSize(size_t nbytes);

 private:
  void ReleaseCachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string OutOfMemoryMessageLocked(size_t rounded) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_index_;
  // Lock order: a leaf. Taken under DeviceData::mu_ (allocation), and under
  // any lock whose scope destroys the last owner of a buffer.
  mutable absl::Mutex mu_;
  // Live blocks: start -> size.
  absl::flat_hash_map<const void*, size_t> live_ ABSL_GUARDED_BY(mu_);
  // Cached (freed) blocks by size, for best-fit reuse.
  std::multimap<size_t, void*> cached_ ABSL_GUARDED_BY(mu_);
  ArenaStats stats_ ABSL_GUARDED_BY(mu_);
};

// The host's physical memory and what of it is available now, in bytes.
struct HostMemory {
  int64_t total = 0;
  int64_t available = 0;
};
HostMemory HostMemoryInfo();

// "1.50 MiB": sizes in error messages and reports.
std::string FormatBytes(int64_t bytes);

}  // namespace torch_neuron::runtime

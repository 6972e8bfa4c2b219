#include "runtime/device_arena.h"

#include <algorithm>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace torch_neuron::runtime {
namespace {

// A cached block is reused for a request only if it wastes at most this much of
// itself; larger blocks stay for larger requests.
constexpr size_t kMaxReuseSlackDivisor = 2;

}  // namespace

std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return absl::StrFormat("%d bytes", bytes);
  return absl::StrFormat("%.2f %s", v, units[u]);
}

DeviceArena::DeviceArena(int device_index, int64_t limit_bytes) : device_index_(device_index) {
  stats_.limit_bytes = limit_bytes;
}

DeviceArena::~DeviceArena() {
  absl::MutexLock lock(&mu_);
  ReleaseCachedLocked();
  // Live blocks at exit belong to tensors that outlive the arena (static
  // tensors destroyed later would free into a dead arena), so they are leaked on
  // purpose; the arena itself is never destroyed in practice.
}

size_t DeviceArena::RoundSize(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  return (nbytes + kBlockRound - 1) / kBlockRound * kBlockRound;
}

absl::StatusOr<void*> DeviceArena::Allocate(size_t nbytes) {
  const size_t rounded = RoundSize(nbytes);
  absl::MutexLock lock(&mu_);

  // Best fit among cached blocks that are not much larger than the request.
  auto it = cached_.lower_bound(rounded);
  if (it != cached_.end() && it->first - rounded <= it->first / kMaxReuseSlackDivisor) {
    size_t size = it->first;
    void* ptr = it->second;
    cached_.erase(it);
    live_.emplace(ptr, size);
    stats_.cached_blocks -= 1;
    stats_.active_blocks += 1;
    stats_.allocated_bytes += static_cast<int64_t>(size);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    stats_.num_allocs += 1;
    stats_.num_cache_hits += 1;
    return ptr;
  }

  auto fits = [&] {
    return stats_.limit_bytes == 0 ||
           stats_.reserved_bytes + static_cast<int64_t>(rounded) <= stats_.limit_bytes;
  };
  if (!fits()) ReleaseCachedLocked();
  if (!fits()) {
    stats_.num_ooms += 1;
    return absl::ResourceExhaustedError(OutOfMemoryMessageLocked(rounded));
  }
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  if (ptr == nullptr) {
    // The host itself is out of memory: give back the cache and try once more.
    ReleaseCachedLocked();
    ptr = std::aligned_alloc(kAlignment, rounded);
    if (ptr == nullptr) {
      stats_.num_ooms += 1;
      return absl::ResourceExhaustedError(OutOfMemoryMessageLocked(rounded) +
                                          " The host could not provide the memory.");
    }
  }
  live_.emplace(ptr, rounded);
  stats_.num_host_allocs += 1;
  stats_.reserved_bytes += static_cast<int64_t>(rounded);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  stats_.active_blocks += 1;
  stats_.allocated_bytes += static_cast<int64_t>(rounded);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.num_allocs += 1;
  return ptr;
}

bool DeviceArena::Free(void* ptr) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  size_t size = it->second;
  live_.erase(it);
  cached_.emplace(size, ptr);
  stats_.active_blocks -= 1;
  stats_.cached_blocks += 1;
  stats_.allocated_bytes -= static_cast<int64_t>(size);
  stats_.num_frees += 1;
  return true;
}

bool DeviceArena::Owns(const void* ptr) const {
  absl::MutexLock lock(&mu_);
  return live_.contains(ptr);
}

size_t DeviceArena::BlockSize(const void* ptr) const {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second;
}

void DeviceArena::EmptyCache() {
  absl::MutexLock lock(&mu_);
  ReleaseCachedLocked();
}

void DeviceArena::ReleaseCachedLocked() {
  for (auto& [size, ptr] : cached_) {
    std::free(ptr);
    stats_.reserved_bytes -= static_cast<int64_t>(size);
    stats_.num_host_frees += 1;
  }
  stats_.cached_blocks = 0;
  cached_.clear();
}

ArenaStats DeviceArena::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void DeviceArena::ResetPeakStats() {
  absl::MutexLock lock(&mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void DeviceArena::ResetAccumulatedStats() {
  absl::MutexLock lock(&mu_);
  stats_.num_allocs = stats_.num_frees = stats_.num_cache_hits = 0;
  stats_.num_host_allocs = stats_.num_host_frees = stats_.num_ooms = 0;
}

void DeviceArena::SetLimit(int64_t limit_bytes) {
  absl::MutexLock lock(&mu_);
  stats_.limit_bytes = limit_bytes;
}

HostMemory HostMemoryInfo() {
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  HostMemory m{::sysconf(_SC_PHYS_PAGES) * page, ::sysconf(_SC_AVPHYS_PAGES) * page};
  // MemAvailable counts the page cache the kernel would give up, as free does.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      m.available = kib * 1024;
      break;
    }
  }
  return m;
}

std::string DeviceArena::OutOfMemoryMessageLocked(size_t rounded) const {
  return absl::StrFormat(
      "neuron:%d out of memory: tried to allocate %s; %s already allocated by tensors, "
      "%s reserved in total, device limit %s (TORCH_NEURON_MEMORY_LIMIT_MB). "
      "Free tensors you no longer need or raise the limit.",
      device_index_, FormatBytes(static_cast<int64_t>(rounded)), FormatBytes(stats_.allocated_bytes),
      FormatBytes(stats_.reserved_bytes), FormatBytes(stats_.limit_bytes));
}

}  // namespace torch_neuron::runtime

#include "runtime/pinned_allocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::runtime {
namespace {

constexpr size_t kAlignment = 64;

// Blocks are allocated on request and freed with their tensors: nothing is
// cached, so no stream bookkeeping is needed before a block is reused.
class Pinned final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &Delete, cpu);
    const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "cannot allocate ", nbytes,
                     " bytes of pinned host memory");
    // Locked when RLIMIT_MEMLOCK allows; the memory serves either way.
    const bool locked = ::mlock(ptr, rounded) == 0;
    absl::MutexLock lock(&mu_);
    live_.emplace(ptr, Block{rounded, locked});
    for (c10::CachingAllocator::Stat* s : {&stats_.active_requests, &stats_.allocations}) s->increase(1);
    for (c10::CachingAllocator::Stat* s : {&stats_.active_bytes, &stats_.allocated_bytes})
      s->increase(rounded);
    stats_.num_host_alloc += 1;
    return c10::DataPtr(ptr, ptr, &Delete, cpu);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    absl::MutexLock lock(&mu_);
    for (c10::CachingAllocator::Stat* s :
         {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations, &stats_.allocated_bytes}) {
      s->reset_accumulated();
    }
    stats_.num_host_alloc = stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    absl::MutexLock lock(&mu_);
    for (c10::CachingAllocator::Stat* s :
         {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations, &stats_.allocated_bytes}) {
      s->reset_peak();
    }
  }

  bool Owns(const void* ptr) {
    absl::MutexLock lock(&mu_);
    return live_.contains(ptr);
  }

 private:
  struct Block {
    size_t bytes;
    bool locked;
  };

  static void Delete(void* ptr);
  void Free(void* ptr) {
    Block block{0, false};
    {
      absl::MutexLock lock(&mu_);
      auto it = live_.find(ptr);
      if (it == live_.end()) return;
      block = it->second;
      live_.erase(it);
      for (c10::CachingAllocator::Stat* s : {&stats_.active_requests, &stats_.allocations}) s->decrease(1);
      for (c10::CachingAllocator::Stat* s : {&stats_.active_bytes, &stats_.allocated_bytes}) {
        s->decrease(block.bytes);
      }
      stats_.num_host_free += 1;
    }
    if (block.locked) ::munlock(ptr, block.bytes);
    std::free(ptr);
  }

  absl::Mutex mu_;
  absl::flat_hash_map<const void*, Block> live_ ABSL_GUARDED_BY(mu_);
  at::HostStats stats_ ABSL_GUARDED_BY(mu_);
};

Pinned& Instance() {
  static auto* pinned = new Pinned();  // never destroyed: tensors may outlive statics
  return *pinned;
}

void Pinned::Delete(void* ptr) {
  if (ptr != nullptr) Instance().Free(ptr);
}

// torch.accelerator.memory's host functions (empty_host_cache, host stats)
// and pin_memory(device="neuron") find it here.
const bool kRegistered = [] {
  at::setHostAllocator(c10::DeviceType::PrivateUse1, &Instance());
  return true;
}();

}  // namespace

c10::Allocator* PinnedHostAllocator() { return &Instance(); }

bool IsPinnedHostPtr(const void* ptr) { return ptr != nullptr && Instance().Owns(ptr); }

}  // namespace torch_neuron::runtime

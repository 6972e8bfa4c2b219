#include "runtime/pinned_allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "base/metrics.h"

namespace torch_neuron::runtime {
namespace {

constexpr size_t kAlignment = 64;

class Pinned final : public c10::Allocator {
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
    static metrics::Counter* bytes = metrics::GetCounter("pinned.allocated.bytes");
    bytes->Add(static_cast<int64_t>(rounded));
    {
      absl::MutexLock lock(&Mu());
      Live().emplace(ptr, Block{rounded, locked});
    }
    return c10::DataPtr(ptr, ptr, &Delete, cpu);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  static bool Owns(const void* ptr) {
    absl::MutexLock lock(&Mu());
    return Live().contains(ptr);
  }

 private:
  struct Block {
    size_t bytes;
    bool locked;
  };
  static absl::Mutex& Mu() {
    static auto* mu = new absl::Mutex();
    return *mu;
  }
  static absl::flat_hash_map<const void*, Block>& Live() ABSL_EXCLUSIVE_LOCKS_REQUIRED(Mu()) {
    static auto* live = new absl::flat_hash_map<const void*, Block>();
    return *live;
  }
  static void Delete(void* ptr) {
    if (ptr == nullptr) return;
    Block block{0, false};
    {
      absl::MutexLock lock(&Mu());
      auto it = Live().find(ptr);
      if (it != Live().end()) {
        block = it->second;
        Live().erase(it);
      }
    }
    if (block.locked) ::munlock(ptr, block.bytes);
    std::free(ptr);
  }
};

}  // namespace

c10::Allocator* PinnedHostAllocator() {
  static auto* allocator = new Pinned();
  return allocator;
}

bool IsPinnedHostPtr(const void* ptr) { return ptr != nullptr && Pinned::Owns(ptr); }

}  // namespace torch_neuron::runtime

#include "runtime/neuron_allocator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/device_registry.h"
#include "runtime/execution_queue.h"
#include "runtime/fork_guard.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {

c10::DataPtr NeuronAllocator::allocate(size_t nbytes) {
  return ValueOrThrow(AllocateOn(DeviceRegistry::Global().current_device(), nbytes));
}

absl::StatusOr<c10::DataPtr> NeuronAllocator::AllocateOn(int index, size_t nbytes) {
  DeviceRegistry& registry = DeviceRegistry::Global();
  absl::Status valid = registry.CheckIndex(index);
  if (!valid.ok()) return valid;
  const c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
  if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &Delete, device);
  if (InBadFork()) return BadForkError();
  absl::StatusOr<void*> ptr = registry.arena(index).Allocate(nbytes);
  if (!ptr.ok()) return ptr.status();
  return c10::DataPtr(*ptr, *ptr, &Delete, device);
}

void NeuronAllocator::Delete(void* ptr) {
  // A bad-fork child drops blocks of its copy of the parent's arena without
  // taking the arena's lock, which a parent thread may have held at the fork.
  if (ptr == nullptr || InBadFork()) return;
  DeviceArena* arena = DeviceRegistry::Global().FindOwner(ptr);
  // A pointer no arena knows is a programmer error (double free or foreign memory).
  TORCH_INTERNAL_ASSERT(arena != nullptr, "neuron allocator: freeing unknown block ", ptr);
  arena->Free(ptr);
}

void NeuronAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  // Device memory is host memory in this emulation, so a device-to-device copy of
  // raw bytes (storage resize, clone of a storage) is a memcpy.
  std::memcpy(dest, src, count);
}

namespace {

DeviceArena& ArenaAt(c10::DeviceIndex device) {
  DeviceRegistry& registry = DeviceRegistry::Global();
  const int index = registry.Resolve(device);
  ThrowIfError(registry.CheckIndex(index));
  return registry.arena(index);
}

void SetStat(c10::CachingAllocator::Stat& stat, int64_t current, int64_t peak) {
  stat.current = current;
  stat.peak = peak;
}

}  // namespace

void NeuronAllocator::emptyCache(c10::MempoolId_t) {
  DeviceRegistry& registry = DeviceRegistry::Global();
  for (int i = 0; i < registry.device_count(); ++i) registry.arena(i).EmptyCache();
}

c10::CachingDeviceAllocator::DeviceStats NeuronAllocator::getDeviceStats(c10::DeviceIndex device) {
  const ArenaStats s = ArenaAt(device).Stats();
  c10::CachingDeviceAllocator::DeviceStats out;
  constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  SetStat(out.allocated_bytes[kAll], s.allocated_bytes, s.peak_allocated_bytes);
  SetStat(out.active_bytes[kAll], s.allocated_bytes, s.peak_allocated_bytes);
  SetStat(out.requested_bytes[kAll], s.allocated_bytes, s.peak_allocated_bytes);
  SetStat(out.reserved_bytes[kAll], s.reserved_bytes, s.peak_reserved_bytes);
  SetStat(out.allocation[kAll], s.active_blocks, s.active_blocks);
  out.allocation[kAll].allocated = s.num_allocs;
  out.allocation[kAll].freed = s.num_frees;
  SetStat(out.active[kAll], s.active_blocks, s.active_blocks);
  SetStat(out.segment[kAll], s.active_blocks + s.cached_blocks, s.active_blocks + s.cached_blocks);
  out.num_ooms = s.num_ooms;
  out.num_device_alloc = s.num_host_allocs;
  out.num_device_free = s.num_host_frees;
  return out;
}

void NeuronAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  ArenaAt(device).ResetAccumulatedStats();
}

void NeuronAllocator::resetPeakStats(c10::DeviceIndex device) { ArenaAt(device).ResetPeakStats(); }

std::pair<size_t, size_t> NeuronAllocator::getMemoryInfo(c10::DeviceIndex device) {
  const ArenaStats s = ArenaAt(device).Stats();
  const HostMemory host = HostMemoryInfo();
  if (s.limit_bytes > 0) {
    const int64_t free = std::max<int64_t>(0, s.limit_bytes - s.reserved_bytes);
    return {static_cast<size_t>(std::min<int64_t>(free, host.available)), static_cast<size_t>(s.limit_bytes)};
  }
  return {static_cast<size_t>(host.available), static_cast<size_t>(host.total)};
}

NeuronAllocator* GetNeuronAllocator() {
  static NeuronAllocator allocator;
  return &allocator;
}

// The allocator behind every PrivateUse1 storage.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, GetNeuronAllocator());

namespace {

class DeviceMemoryAsHost final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const int queue = CurrentQueueDevice();
    const int device = queue >= 0 ? queue : DeviceRegistry::Global().current_device();
    c10::DataPtr ptr = ValueOrThrow(GetNeuronAllocator()->AllocateOn(device, nbytes));
    void* data = ptr.get();
    return c10::DataPtr(data, ptr.release_context(), GetNeuronAllocator()->raw_deleter(),
                        c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return GetNeuronAllocator()->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

}  // namespace

c10::Allocator* DeviceMemoryAsHostAllocator() {
  static auto* allocator = new DeviceMemoryAsHost();
  return allocator;
}

bool IsDeviceMemory(const c10::DataPtr& ptr) {
  return ptr.get() != nullptr && ptr.get_deleter() == GetNeuronAllocator()->raw_deleter();
}

}  // namespace torch_neuron::runtime

#include "runtime/neuron_allocator.h"

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

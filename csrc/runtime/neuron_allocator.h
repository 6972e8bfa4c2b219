// The c10::Allocator of neuron tensors: hands out blocks of the current device's
// DeviceArena. Registered for DeviceType::PrivateUse1 at load time.
// Thread-safe (the arenas are).
#pragma once

#include <c10/core/Allocator.h>

#include "absl/status/statusor.h"

namespace torch_neuron::runtime {

class NeuronAllocator final : public c10::Allocator {
 public:
  // On the current device; raises torch.OutOfMemoryError past the limit.
  c10::DataPtr allocate(size_t nbytes) override;
  // On `device`; RESOURCE_EXHAUSTED past the limit.
  absl::StatusOr<c10::DataPtr> AllocateOn(int device, size_t nbytes);
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  static void Delete(void* ptr);
};

NeuronAllocator* GetNeuronAllocator();

// Device memory presented as CPU memory, for kernels the emulated device runs
// (they are host code): allocates in the arena of the device whose queue the
// calling thread runs (the current device elsewhere), so a kernel's outputs
// are device memory from the start and its DeviceData adopts them without a
// copy. Raises torch.OutOfMemoryError past the device's limit.
c10::Allocator* DeviceMemoryAsHostAllocator();

// Whether `ptr` is a block of an arena's, owned through this DataPtr.
bool IsDeviceMemory(const c10::DataPtr& ptr);

}  // namespace torch_neuron::runtime

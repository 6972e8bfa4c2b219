// The c10 allocator of neuron tensors: hands out blocks of the current device's
// DeviceArena. Registered for DeviceType::PrivateUse1 at load time. A
// c10::DeviceAllocator, so torch.accelerator.memory (statistics, empty_cache,
// get_memory_info) reads the arenas.
// Thread-safe (the arenas are).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <utility>

#include "absl/status/statusor.h"

namespace torch_neuron::runtime {

class NeuronAllocator final : public c10::DeviceAllocator {
 public:
  // On the current device; raises torch.OutOfMemoryError past the limit.
  c10::DataPtr allocate(size_t nbytes) override;
  // On `device`; RESOURCE_EXHAUSTED past the limit.
  absl::StatusOr<c10::DataPtr> AllocateOn(int device, size_t nbytes);
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator.
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id) override;
  // One in-order queue per device: a freed block is never reused while
  // queued work still reads it (the work holds the block).
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  // (free, total) bytes: the memory limit when one is set, else the host's.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

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

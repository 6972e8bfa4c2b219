// The c10::Allocator of neuron tensors: hands out blocks of the current device's
// DeviceArena. Registered for DeviceType::PrivateUse1 at load time.
// Thread-safe (the arenas are).
#pragma once

#include <c10/core/Allocator.h>

namespace torch_neuron::runtime {

class NeuronAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  static void Delete(void* ptr);
};

NeuronAllocator* GetNeuronAllocator();

}  // namespace torch_neuron::runtime

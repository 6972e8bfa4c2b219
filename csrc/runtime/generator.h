// NeuronGenerator: the random number generator of a neuron device.
//
// Its state is device-resident: a Mersenne Twister stream seeded exactly like
// PyTorch's CPU generator, consumed by random ops in program order when graphs
// execute on the device's queue. So a graph's random ops take the generator as a
// parameter (every step draws fresh numbers from the same executable), the same
// torch.manual_seed replays the same numbers, and a neuron run draws exactly the
// numbers a CPU run with the same seed draws (dropout masks match the CPU's).
//
// Reading or writing the state (seed, get_state, set_state) first waits for the
// device's queued work, through the hook set by SetGeneratorSyncHook.
//
// Like every c10 generator, not thread-safe on its own: callers hold mutex_.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <functional>

namespace torch_neuron::runtime {

class NeuronGeneratorImpl : public c10::GeneratorImpl {
 public:
  explicit NeuronGeneratorImpl(c10::DeviceIndex device_index);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The stream random kernels draw from when they run (on the device's queue).
  const at::Generator& host_generator() const { return host_; }

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  // Waits until queued work that may still draw from this generator has run.
  void SyncDevice() const;

  mutable at::Generator host_;  // mutable: locking its mutex is not a logical change
};

// The default generator of device `index` (-1: current device).
const at::Generator& DefaultNeuronGenerator(c10::DeviceIndex index);

// Installed by the lazy layer: runs pending random work of a device and waits
// for its queue, so state reads and reseeds see every earlier draw.
void SetGeneratorSyncHook(std::function<void(c10::DeviceIndex)> hook);

}  // namespace torch_neuron::runtime

// NeuronGenerator: the random number generator of a neuron device.
//
// Its state is a seed and an offset (16 bytes), as on accelerators whose random
// kernels are counter based: every random op draws a fresh stream from
// (seed, offset) and advances the offset, so the same seed replays the same
// numbers and a compiled graph can take seed and offset as parameters.
//
// Not thread-safe on its own, like every c10 generator: callers hold mutex_.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torch_neuron::runtime {

class NeuronGeneratorImpl : public c10::GeneratorImpl {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // c10's default_rng_seed_val

  explicit NeuronGeneratorImpl(c10::DeviceIndex device_index, uint64_t seed = kDefaultSeed);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;  // a fresh non-deterministic seed, set and returned
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The seed of the stream for the next random op; advances the offset.
  // Distinct (seed, offset) pairs give well-mixed, distinct stream seeds.
  uint64_t NextStreamSeed();

 private:
  NeuronGeneratorImpl* clone_impl() const override;

  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of device `index` (-1: current device).
const at::Generator& DefaultNeuronGenerator(c10::DeviceIndex index);

}  // namespace torch_neuron::runtime

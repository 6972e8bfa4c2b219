#include "runtime/generator.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <deque>
#include <random>

#include "runtime/device_registry.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {
namespace {

constexpr size_t kStateBytes = 2 * sizeof(uint64_t);

// SplitMix64 finalizer: a bijective mix, so distinct inputs stay distinct.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device_index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t NeuronGeneratorImpl::seed() {
  uint64_t fresh = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  set_current_seed(fresh);
  return fresh;
}

uint64_t NeuronGeneratorImpl::NextStreamSeed() { return Mix64(seed_ ^ Mix64(offset_++)); }

void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "neuron generator state must be a torch.ByteTensor, got ",
                   new_state.dtype().name());
  TORCH_CHECK_VALUE(static_cast<size_t>(new_state.numel()) == kStateBytes,
                    "neuron generator state must have ", kStateBytes, " bytes, got ",
                    new_state.numel());
  const uint8_t* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, sizeof(seed_));
  std::memcpy(&offset_, bytes + sizeof(seed_), sizeof(offset_));
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, at::kByte,
                                     std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  uint8_t* bytes = static_cast<uint8_t*>(state.data_ptr());
  std::memcpy(bytes, &seed_, sizeof(seed_));
  std::memcpy(bytes + sizeof(seed_), &offset_, sizeof(offset_));
  return state.getIntrusivePtr();
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  auto* copy = new NeuronGeneratorImpl(device().index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& DefaultNeuronGenerator(c10::DeviceIndex index) {
  DeviceRegistry& registry = DeviceRegistry::Global();
  const int resolved = registry.Resolve(index);
  ThrowIfError(registry.CheckIndex(resolved));
  // One per device, created once, never destroyed (Python holds references).
  static std::deque<at::Generator>* generators = [&] {
    auto* gens = new std::deque<at::Generator>();
    for (int i = 0; i < registry.device_count(); ++i) {
      gens->push_back(at::make_generator<NeuronGeneratorImpl>(static_cast<c10::DeviceIndex>(i)));
    }
    return gens;
  }();
  return (*generators)[resolved];
}

}  // namespace torch_neuron::runtime

#include "runtime/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/TensorImpl.h>

#include <deque>

#include "runtime/device_registry.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {
namespace {

std::function<void(c10::DeviceIndex)>& SyncHook() {
  static auto* hook = new std::function<void(c10::DeviceIndex)>();
  return *hook;
}

}  // namespace

void SetGeneratorSyncHook(std::function<void(c10::DeviceIndex)> hook) { SyncHook() = std::move(hook); }

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device_index)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(at::make_generator<at::CPUGeneratorImpl>()) {}

void NeuronGeneratorImpl::SyncDevice() const {
  if (SyncHook()) SyncHook()(device().index());
}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  SyncDevice();
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_current_seed(seed);
}

uint64_t NeuronGeneratorImpl::current_seed() const { return host_.current_seed(); }

uint64_t NeuronGeneratorImpl::seed() {
  SyncDevice();
  std::lock_guard<std::mutex> lock(host_.mutex());
  return host_.seed();
}

void NeuronGeneratorImpl::set_offset(uint64_t offset) {
  TORCH_CHECK(false,
              "neuron generators are Mersenne Twister streams and have no offset; "
              "use get_state()/set_state()");
}

uint64_t NeuronGeneratorImpl::get_offset() const {
  TORCH_CHECK(false,
              "neuron generators are Mersenne Twister streams and have no offset; "
              "use get_state()/set_state()");
}

void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  SyncDevice();
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  SyncDevice();
  std::lock_guard<std::mutex> lock(host_.mutex());
  return host_.unsafeGetGeneratorImpl()->get_state();
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  SyncDevice();
  auto* copy = new NeuronGeneratorImpl(device().index());
  std::lock_guard<std::mutex> lock(host_.mutex());
  copy->host_ = host_.clone();
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

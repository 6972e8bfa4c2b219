// The PrivateUse1 hooks: how ATen asks about the neuron backend (is it there, how
// many devices, generators, which device owns a pointer). Registered at load time.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <c10/core/StorageImpl.h>

#include "runtime/device_registry.h"
#include "runtime/generator.h"
#include "runtime/neuron_allocator.h"
#include "runtime/pinned_allocator.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {
namespace {

class NeuronHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return DeviceRegistry::Global().device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return true; }

  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(DeviceRegistry::Global().device_count());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    ThrowIfError(DeviceRegistry::Global().SetCurrentDevice(device));
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(DeviceRegistry::Global().current_device());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = getCurrentDevice();
    setCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (DeviceRegistry::Global().CheckIndex(device).ok()) return exchangeDevice(device);
    return getCurrentDevice();
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return DefaultNeuronGenerator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    DeviceRegistry& registry = DeviceRegistry::Global();
    const int index = registry.Resolve(device_index);
    ThrowIfError(registry.CheckIndex(index));
    return at::make_generator<NeuronGeneratorImpl>(static_cast<c10::DeviceIndex>(index));
  }

  at::Device getDeviceFromPtr(void* data) const override {
    DeviceArena* arena = DeviceRegistry::Global().FindOwner(data);
    TORCH_CHECK(arena != nullptr, "pointer ", data, " is not the start of a neuron allocation");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(arena->device_index()));
  }

  bool isPinnedPtr(const void* data) const override { return IsPinnedHostPtr(data); }

  at::Allocator* getPinnedMemoryAllocator() const override { return PinnedHostAllocator(); }

  // Storage.resize_() on a neuron storage: a new block, the old bytes copied over.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "cannot resize a neuron storage that is not resizable");
    c10::DataPtr fresh = impl->allocator()->allocate(new_bytes);
    const size_t keep = std::min(new_bytes, impl->nbytes());
    if (keep > 0) impl->allocator()->copy_data(fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }
};

// Registered when the library loads, so isPrivateUse1HooksRegistered() is true
// before Python renames the backend.
const bool kRegistered = [] {
  at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  return true;
}();

}  // namespace
}  // namespace torch_neuron::runtime

#include "runtime/device_registry.h"

#include "absl/strings/str_cat.h"

namespace torch_neuron::runtime {
namespace {

thread_local int current_device_index = 0;

}  // namespace

DeviceRegistry::DeviceRegistry(const DeviceConfig& config) {
  arenas_.reserve(config.num_devices);
  for (int i = 0; i < config.num_devices; ++i) {
    arenas_.push_back(std::make_unique<DeviceArena>(i, config.memory_limit_bytes));
  }
}

DeviceRegistry& DeviceRegistry::InitGlobal(const DeviceConfig& config) {
  // Built by the first caller, never destroyed: tensors freed during
  // interpreter shutdown still return their blocks to an arena.
  static DeviceRegistry* registry = new DeviceRegistry(config);
  return *registry;
}

DeviceRegistry& DeviceRegistry::Global() {
  static DeviceRegistry* registry = &InitGlobal(DeviceConfig());
  return *registry;
}

absl::Status DeviceRegistry::CheckIndex(int index) const {
  if (index >= 0 && index < device_count()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("neuron device index ", index, " is out of range: this process has ", device_count(),
                   " neuron device", device_count() == 1 ? "" : "s", " (valid indices 0..",
                   device_count() - 1, "; set TORCH_NEURON_NUM_DEVICES for more)."));
}

DeviceArena* DeviceRegistry::FindOwner(const void* ptr) {
  for (auto& arena : arenas_) {
    if (arena->Owns(ptr)) return arena.get();
  }
  return nullptr;
}

int DeviceRegistry::current_device() const { return current_device_index; }

absl::Status DeviceRegistry::SetCurrentDevice(int index) {
  absl::Status status = CheckIndex(index);
  if (status.ok()) current_device_index = index;
  return status;
}

}  // namespace torch_neuron::runtime

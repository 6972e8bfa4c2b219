// DeviceRegistry: the set of emulated neuron devices of this process, their
// memory arenas, and the calling thread's current device.
//
// The device count and memory limit come from the DeviceConfig given at
// construction (TORCH_NEURON_NUM_DEVICES, TORCH_NEURON_MEMORY_LIMIT_MB). Torch-free.
// Thread-safe: the arenas are created up front and are thread-safe themselves;
// the current device is per thread, as with CUDA.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "base/config.h"
#include "runtime/device_arena.h"

namespace torch_neuron::runtime {

class DeviceRegistry {
 public:
  explicit DeviceRegistry(const DeviceConfig& config);

  // Builds the registry of this process from `config` unless it exists (the
  // top calls it once the config is read: the Python package's _init), and
  // returns it.
  static DeviceRegistry& InitGlobal(const DeviceConfig& config);
  // The registry of this process; built from the default DeviceConfig if
  // InitGlobal was not called first (C++ tests).
  static DeviceRegistry& Global();

  int device_count() const { return static_cast<int>(arenas_.size()); }

  // OK for 0 <= index < device_count(); otherwise INVALID_ARGUMENT naming the
  // index and the valid range.
  absl::Status CheckIndex(int index) const;

  // Resolves -1 ("the current device") to the current index.
  int Resolve(int index) const { return index < 0 ? current_device() : index; }

  // Precondition: CheckIndex(index).ok().
  DeviceArena& arena(int index) { return *arenas_[index]; }

  // The arena holding the live block at `ptr`, or nullptr.
  DeviceArena* FindOwner(const void* ptr);

  int current_device() const;
  absl::Status SetCurrentDevice(int index);

 private:
  std::vector<std::unique_ptr<DeviceArena>> arenas_;
};

}  // namespace torch_neuron::runtime

// torch.profiler's side of the device's profiler (base/profiler.h): every
// profiler::Scope is also a RecordFunction (a torch.profiler user scope,
// "neuron::<category> <name>") whenever torch.profiler records. The bridge is
// installed when the runtime loads. Thread-safe.
#pragma once

#include <memory>

namespace torch_neuron::runtime {

// torch.profiler listens on the threads that start it only: work queued for
// another thread (a device queue) carries the queuing thread's listeners
// there. Capture returns nullptr when the calling thread has none.
struct TorchListeners;
std::shared_ptr<const TorchListeners> CaptureTorchListeners();
class ScopedTorchListeners {
 public:
  explicit ScopedTorchListeners(const std::shared_ptr<const TorchListeners>& listeners);
  ~ScopedTorchListeners();
  ScopedTorchListeners(const ScopedTorchListeners&) = delete;
  ScopedTorchListeners& operator=(const ScopedTorchListeners&) = delete;

 private:
  std::unique_ptr<TorchListeners> saved_;
};

}  // namespace torch_neuron::runtime

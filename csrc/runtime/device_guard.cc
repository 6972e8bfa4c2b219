// The c10 device guard of neuron devices: which device is current, and the one
// (default) stream of each. Registered for PrivateUse1 at load time, which is what
// makes torch.accelerator, DeviceGuard and Tensor.to("neuron:1") work.
//
// Stateless and thread-safe: the current device lives in DeviceRegistry (per thread).
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/device_registry.h"
#include "runtime/execution_queue.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {
namespace {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

class NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device old = getDevice();
    if (old.index() != device.index()) setDevice(device);
    return old;
  }

  c10::Device getDevice() const override {
    return c10::Device(kNeuron,
                       static_cast<c10::DeviceIndex>(DeviceRegistry::Global().current_device()));
  }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kNeuron, "expected a neuron device, got ", device);
    ThrowIfError(DeviceRegistry::Global().SetCurrentDevice(device.index()));
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    // Restoring a device saved by a guard: the index was valid when saved.
    (void)DeviceRegistry::Global().SetCurrentDevice(device.index());
  }

  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    // One in-order queue per device: every stream is the default stream.
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(DeviceRegistry::Global().device_count());
  }

  bool queryStream(const c10::Stream& stream) const override { return true; }

  void synchronizeStream(const c10::Stream& stream) const override {}

  // Waits for the graphs queued on the device; raises the first execution error.
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    ThrowIfError(DeviceRegistry::Global().CheckIndex(device_index));
    ExecutionQueue& queue = ExecutionQueue::ForDevice(device_index);
    queue.Drain();
    ThrowIfError(queue.TakeError());
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {}
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {}
  void synchronizeEvent(void* event) const override {}
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace torch_neuron::runtime

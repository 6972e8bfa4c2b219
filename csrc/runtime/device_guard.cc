// The c10 device guard of neuron devices: which device is current, the one
// stream of each (its execution queue), events on it and what the device
// supports. Registered for PrivateUse1 at load time, which is what makes
// torch.accelerator, torch.Stream / torch.Event, DeviceGuard and
// Tensor.to("neuron:1") work.
//
// Stateless and thread-safe: the current device lives in DeviceRegistry (per
// thread), events in DeviceEvent objects.
#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/device_event.h"
#include "runtime/device_registry.h"
#include "base/dtypes.h"
#include "runtime/execution_queue.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {
namespace {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// "neuron" without an index is the current device.
c10::Device Resolved(c10::Device device) {
  return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(DeviceRegistry::Global().Resolve(
                                  device.has_index() ? device.index() : -1)));
}

int QueueOf(const c10::Stream& stream) { return Resolved(stream.device()).index(); }

class NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device old = getDevice();
    if (old.index() != device.index()) setDevice(device);
    return old;
  }

  c10::Device getDevice() const override {
    return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(DeviceRegistry::Global().current_device()));
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
    return c10::Stream(c10::Stream::DEFAULT, Resolved(device));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, Resolved(device));
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    // One in-order queue per device: every stream is the default stream.
    return c10::Stream(c10::Stream::DEFAULT, Resolved(device));
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, Resolved(stream.device()));
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(DeviceRegistry::Global().device_count());
  }

  // The stream is the device's queue: done when nothing queued is left.
  bool queryStream(const c10::Stream& stream) const override {
    return ExecutionQueue::ForDevice(QueueOf(stream)).Idle();
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    synchronizeDevice(static_cast<c10::DeviceIndex>(QueueOf(stream)));
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    c10::DeviceCapability capability;
#define TN_SUPPORTED(_, name) \
  capability.capability_data.supported_scalar_types.has_##name = IsSupportedDtype(c10::ScalarType::name);
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(TN_SUPPORTED)
#undef TN_SUPPORTED
    return capability;
  }

  // Waits for the graphs queued on the device; raises the first execution error.
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    ThrowIfError(DeviceRegistry::Global().CheckIndex(device_index));
    ExecutionQueue& queue = ExecutionQueue::ForDevice(device_index);
    queue.Drain();
    ThrowIfError(queue.TakeError());
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    const int queue = QueueOf(stream);
    TORCH_CHECK(device_index == -1 || device_index == queue, "an event of neuron:", device_index,
                " cannot be recorded on a stream of neuron:", queue);
    if (*event == nullptr) *event = new DeviceEvent(queue);
    static_cast<DeviceEvent*>(*event)->Record(queue);
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event != nullptr) static_cast<DeviceEvent*>(event)->Block(QueueOf(stream));
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || static_cast<DeviceEvent*>(event)->Query();
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    delete static_cast<DeviceEvent*>(event);
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) static_cast<DeviceEvent*>(event)->Synchronize();
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "elapsed_time needs both events recorded (Event.record()) first");
    return static_cast<DeviceEvent*>(start)->ElapsedMillis(*static_cast<DeviceEvent*>(end));
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace torch_neuron::runtime

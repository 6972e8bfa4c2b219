#include "runtime/device_event.h"

#include <c10/util/Exception.h>

#include <chrono>

#include "runtime/execution_queue.h"

namespace torch_neuron::runtime {
namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void DeviceEvent::Record(int device) {
  auto marker = std::make_shared<Marker>();
  ExecutionQueue::ForDevice(device).Enqueue([marker] {
    marker->nanos = NowNanos();
    marker->reached.Notify();
    return absl::OkStatus();
  });
  device_ = device;
  marker_ = std::move(marker);
}

void DeviceEvent::Block(int device) const {
  if (marker_ == nullptr || device == device_) return;
  ExecutionQueue::ForDevice(device).Enqueue([marker = marker_] {
    marker->reached.WaitForNotification();
    return absl::OkStatus();
  });
}

bool DeviceEvent::Query() const { return marker_ == nullptr || marker_->reached.HasBeenNotified(); }

void DeviceEvent::Synchronize() const {
  if (marker_ != nullptr) marker_->reached.WaitForNotification();
}

double DeviceEvent::ElapsedMillis(const DeviceEvent& end) const {
  TORCH_CHECK(marker_ != nullptr && end.marker_ != nullptr,
              "elapsed_time needs both events recorded (Event.record()) first");
  Synchronize();
  end.Synchronize();
  return static_cast<double>(end.marker_->nanos - marker_->nanos) / 1e6;
}

}  // namespace torch_neuron::runtime

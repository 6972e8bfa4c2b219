// Events of neuron devices: markers in a device's execution queue, as CUDA
// events are markers in a stream. A device has one in-order queue, so every
// neuron stream is that queue (torch.neuron.Stream objects all name it), and
// an event recorded on it completes when the queue reaches it: after every
// graph queued before (mark_step queues a step's graph; ops traced and not yet
// synced are not on the queue). Timing events stamp the host clock when the
// queue reaches them.
//
// An event is used by one thread at a time, like a torch.Event; what its
// markers share with the queue thread is thread-safe.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/synchronization/notification.h"

namespace torch_neuron::runtime {

class DeviceEvent {
 public:
  explicit DeviceEvent(int device) : device_(device) {}

  int device() const { return device_; }

  // Places a new marker at the end of `device`'s queue (an event moves to the
  // device it is recorded on).
  void Record(int device);
  // Makes `device`'s queue wait, where it stands now, for the last marker.
  // Nothing to do on the marker's own in-order queue.
  void Block(int device) const;
  // True if never recorded, or the last marker has been reached.
  bool Query() const;
  // Waits for the last marker.
  void Synchronize() const;
  // Milliseconds from this event's marker to `end`'s, after both are reached.
  // Raises if either was never recorded.
  double ElapsedMillis(const DeviceEvent& end) const;

 private:
  struct Marker {
    absl::Notification reached;
    int64_t nanos = 0;  // steady clock when reached; written before `reached`
  };
  int device_;
  std::shared_ptr<Marker> marker_;  // the last record's; null before the first
};

}  // namespace torch_neuron::runtime

// ExecutionQueue: the in-order work queue of one neuron device. Graph
// executions are queued by mark_step and run on the queue's own thread, so
// tracing the next step overlaps the running one.
//
// Thread-safe. Work items run one at a time in the order queued. The first
// error a work item reports is kept until TakeError() collects it at the next
// synchronization point.
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::runtime {

// The device whose queue the calling thread runs, or -1 off the queues (the
// executor's kernels allocate their outputs in that device's memory).
int CurrentQueueDevice();

class ExecutionQueue {
 public:
  using Work = std::function<absl::Status()>;

  explicit ExecutionQueue(int device);
  ~ExecutionQueue();
  ExecutionQueue(const ExecutionQueue&) = delete;
  ExecutionQueue& operator=(const ExecutionQueue&) = delete;

  // The queue of `device`, started on first use, never destroyed.
  static ExecutionQueue& ForDevice(int device);

  void Enqueue(Work work);

  // Blocks until every item queued before the call has run.
  void Drain();

  // True when nothing queued is left to run (a snapshot).
  bool Idle();

  // The first error since the last call, and clears it.
  absl::Status TakeError();

  // True when an error is kept for the next sync (which TakeError would return).
  bool HasError();

  // A reader met `raised` in a buffer it read and raises it itself: once the
  // items queued so far have run (the one that failed may still be reporting
  // it), the kept error is cleared if it is that one, so the next sync does
  // not raise it again. Another kept error stays.
  void ForgetError(const absl::Status& raised);

  int device() const { return device_; }

 private:
  void Loop();

  const int device_;
  absl::Mutex mu_;
  std::deque<Work> work_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // an item is executing
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace torch_neuron::runtime

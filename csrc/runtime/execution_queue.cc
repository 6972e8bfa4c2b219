#include "runtime/execution_queue.h"

#include <pthread.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "runtime/device_registry.h"
#include "runtime/fork_guard.h"
#include "runtime/kernel_team.h"
#include "base/profiler.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {

ExecutionQueue::ExecutionQueue(int device) : device_(device) {
  NoteRuntimeThreadStarted();
  thread_ = std::thread([this] { Loop(); });
}

ExecutionQueue::~ExecutionQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

ExecutionQueue& ExecutionQueue::ForDevice(int device) {
  // Never destroyed: the Python interpreter may still queue work at exit; the
  // atexit hook drains the queues instead.
  // Every sync and read asks for its queue: the lookup takes no lock once the
  // queue exists; the first use creates it (and its thread) under a lock.
  static auto* queues = new std::atomic<ExecutionQueue*>[kMaxDevices]();
  // A forked child's copy of a queue has no thread, and may be mid-item.
  if (InBadFork()) ThrowIfError(BadForkError());
  TORCH_INTERNAL_ASSERT(device >= 0 && device < DeviceRegistry::Global().device_count(),
                        "no execution queue for device ", device);
  if (ExecutionQueue* queue = queues[device].load(std::memory_order_acquire)) return *queue;
  static absl::Mutex create_mu;
  absl::MutexLock lock(&create_mu);
  if (queues[device].load(std::memory_order_relaxed) == nullptr) {
    queues[device].store(new ExecutionQueue(device), std::memory_order_release);
  }
  return *queues[device].load(std::memory_order_relaxed);
}

void ExecutionQueue::Enqueue(Work work) {
  absl::MutexLock lock(&mu_);
  work_.push_back(std::move(work));
}

void ExecutionQueue::Drain() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return work_.empty() && !running_; };
  mu_.Await(absl::Condition(&idle));
}

bool ExecutionQueue::Idle() {
  absl::MutexLock lock(&mu_);
  return work_.empty() && !running_;
}

void ExecutionQueue::ForgetError(const absl::Status& raised) {
  Drain();
  absl::MutexLock lock(&mu_);
  if (error_ == raised) error_ = absl::OkStatus();
}

bool ExecutionQueue::HasError() {
  absl::MutexLock lock(&mu_);
  return !error_.ok();
}

absl::Status ExecutionQueue::TakeError() {
  absl::MutexLock lock(&mu_);
  absl::Status error = std::move(error_);
  error_ = absl::OkStatus();
  return error;
}

namespace {

// The emulated device computes on one host core: its queue thread runs OpenMP
// regions with a team of one, while the Python thread traces on the other cores
// (except a large library call, which the executor gives a team of the kernel
// team's size for its run: runtime/kernel_team.h ScopedLibraryThreads).
// Two OpenMP teams spinning on the same few cores (the caller's and this one's)
// otherwise slow every execution down by orders of magnitude. The ICV is per
// thread, so the user's own CPU work keeps its threads.
void UseOneOpenMpThread() { SetThisThreadsOpenMpThreads(1); }

// A work item that throws fails with the exception's Status (its kind kept:
// an IndexError stays one): an exception escaping this thread would terminate
// the process.
absl::Status RunGuarded(const ExecutionQueue::Work& work) {
  try {
    return work();
  } catch (...) {
    return StatusFromCurrentException();
  }
}

}  // namespace

thread_local int queue_device = -1;

int CurrentQueueDevice() { return queue_device; }

void ExecutionQueue::Loop() {
  // Named for perf, top and gdb (at most 15 characters).
  pthread_setname_np(pthread_self(), ("neuron-queue-" + std::to_string(device_ % 100)).c_str());
  profiler::NameThisThread("neuron:" + std::to_string(device_) + " queue");
  UseOneOpenMpThread();
  queue_device = device_;
  while (true) {
    Work work;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !work_.empty() || stop_; };
      mu_.Await(absl::Condition(&has_work));
      if (work_.empty()) return;  // stop_ with nothing left
      work = std::move(work_.front());
      work_.pop_front();
      running_ = true;
    }
    absl::Status status;
    {
      ForkQuietScope quiet;  // a fork waits for the item (ATen's one-time guards it may hold)
      status = RunGuarded(work);
      work = nullptr;  // release what the item held (buffers) before anyone sees the queue idle
    }
    absl::MutexLock lock(&mu_);
    running_ = false;
    if (!status.ok() && error_.ok()) error_ = std::move(status);
  }
}

}  // namespace torch_neuron::runtime

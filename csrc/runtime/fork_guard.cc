#include "runtime/fork_guard.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace torch_neuron::runtime {
namespace {

std::atomic<bool> bad_fork{false};
std::atomic<int64_t> forks_without_quiet{0};
int busy_at_fork = -1;

// The quiet gate: units in progress, and whether a fork is waiting for them.
// Plain std primitives, released before fork() proceeds, so the child never
// inherits them locked.
struct Gate {
  std::mutex mu;
  std::condition_variable changed;
  int busy = 0;
  bool forking = false;
};

Gate& TheGate() {
  static Gate* gate = new Gate();  // never destroyed: runtime threads outlive exit hooks
  return *gate;
}

thread_local int scope_depth = 0;

void BeforeFork() {
  Gate& gate = TheGate();
  std::unique_lock<std::mutex> lock(gate.mu);
  gate.forking = true;
  // A thread forking from inside its own unit (a kernel that forks) must not
  // wait for itself.
  const int own = scope_depth > 0 ? 1 : 0;
  const bool quiet = gate.changed.wait_for(lock, std::chrono::milliseconds(kForkQuietLimitMs),
                                           [&] { return gate.busy <= own; });
  if (!quiet) forks_without_quiet.fetch_add(1, std::memory_order_relaxed);
}

void AfterForkInParent() {
  Gate& gate = TheGate();
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    gate.forking = false;
  }
  gate.changed.notify_all();
}

void AfterForkInChild() {
  bad_fork.store(true, std::memory_order_relaxed);
  // The child has none of the threads whose units were counted; nothing of
  // the gate is used again (device work is refused), but leave it open.
  Gate& gate = TheGate();
  busy_at_fork = gate.busy;
  gate.forking = false;
}

}  // namespace

ForkQuietScope::ForkQuietScope() {
  if (scope_depth++ > 0) return;
  Gate& gate = TheGate();
  std::unique_lock<std::mutex> lock(gate.mu);
  gate.changed.wait(lock, [&] { return !gate.forking; });
  ++gate.busy;
}

ForkQuietScope::~ForkQuietScope() {
  if (--scope_depth > 0) return;
  Gate& gate = TheGate();
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    --gate.busy;
  }
  gate.changed.notify_all();
}

int UnitsBusyAtFork() { return busy_at_fork; }

int UnitsBusy() {
  Gate& gate = TheGate();
  std::lock_guard<std::mutex> lock(gate.mu);
  return gate.busy;
}

int64_t ForksWithoutQuiet() { return forks_without_quiet.load(std::memory_order_relaxed); }

void NoteRuntimeThreadStarted() {
  static std::once_flag installed;
  std::call_once(installed, [] { ::pthread_atfork(&BeforeFork, &AfterForkInParent, &AfterForkInChild); });
}

bool InBadFork() { return bad_fork.load(std::memory_order_relaxed); }

absl::Status BadForkError() {
  return absl::FailedPreconditionError(
      "Cannot re-initialize neuron in forked subprocess: the parent had started the neuron "
      "runtime, and a forked child inherits its locks and queued work but not its threads. "
      "To use neuron with multiprocessing, use the 'spawn' start method (for a DataLoader: "
      "multiprocessing_context='spawn'); forked workers that only handle CPU data are fine.");
}

}  // namespace torch_neuron::runtime

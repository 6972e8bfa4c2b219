#include "runtime/fork_guard.h"

#include <pthread.h>

#include <atomic>
#include <mutex>

namespace torch_neuron::runtime {
namespace {

std::atomic<bool> bad_fork{false};

void MarkChild() { bad_fork.store(true, std::memory_order_relaxed); }

}  // namespace

void NoteRuntimeThreadStarted() {
  static std::once_flag installed;
  std::call_once(installed, [] { ::pthread_atfork(nullptr, nullptr, &MarkChild); });
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

#include "lazy/scheduler.h"

#include <atomic>

#include "lazy/graph_executor.h"

namespace torch_neuron::lazy {
namespace {

// Every op is compiled (or found in the cache) and queued as its own graph the
// moment it is traced, and waited for: the simplest eager mode, and the
// reference the adaptive one is measured against.
class PerOp : public Scheduler {
 public:
  void OnOpTraced(int device, ir::hash_t op_key, const std::vector<LazyTensorPtr>& created,
                  const RunConfig& run) override {
    (void)op_key;
    (void)run;
    GraphExecutor::Get().RunNow(created);
    GraphExecutor::Get().DrainDevice(device);
  }
};

std::atomic<Scheduler*> adaptive{nullptr};

}  // namespace

Scheduler& PerOpScheduler() {
  static Scheduler* scheduler = new PerOp();
  return *scheduler;
}

Scheduler& EagerScheduler(const RunConfig& run) {
  Scheduler* installed = adaptive.load(std::memory_order_acquire);
  if (installed != nullptr && run.eager_groups) return *installed;
  return PerOpScheduler();
}

void InstallAdaptiveScheduler(Scheduler* scheduler) { adaptive.store(scheduler, std::memory_order_release); }

}  // namespace torch_neuron::lazy

// The Scheduler seam (DESIGN.md "Seams", 5): decides when traced ops run.
//
// The tracer hands every op it emitted to the scheduler of the current mode,
// and every sync of a device (mark_step, .cpu(), .item(), a CPU fallback's
// inputs, reseeding, waiting for the device) first asks that scheduler to run
// what it holds back. Lazy mode holds everything until a sync and needs no
// scheduler call at all (the tracer checks the mode: one branch per op).
// Eager mode has two implementations: the per-op scheduler here (every op
// runs at once as its own graph; TORCH_NEURON_EAGER_GROUPS=0) and the
// adaptive one of eager/ (groups of ops compiled in the background), which
// the Python module installs at import.
#pragma once

#include <memory>
#include <vector>

#include "base/config.h"
#include "ir/hash.h"
#include "lazy/lazy_tensor.h"

namespace torch_neuron::lazy {

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // Called on the tracing thread once an op's node was emitted and its results
  // bound: `created` hold the op's outputs (pending values of one node).
  // `op_key` identifies the op and its arguments' metadata (not what computed
  // them), so the same op on same-shaped inputs has the same key wherever it
  // is traced. `run` is the settings the tracer read for this op.
  virtual void OnOpTraced(int device, ir::hash_t op_key, const std::vector<LazyTensorPtr>& created,
                          const RunConfig& run) = 0;

  // Called before any sync of `device` (also at mark_step, which `step_end`
  // says): runs what the scheduler holds back, so the sync sees every op.
  virtual void BeforeSync(int device, bool step_end) {
    (void)device;
    (void)step_end;
  }

  // Called before the executor drops every compiled program (tests).
  virtual void OnCacheCleared() {}
};

// The scheduler of eager mode under `run` (the adaptive one once installed, or
// per-op when run.eager_groups is off, TORCH_NEURON_EAGER_GROUPS=0, or none is
// installed).
Scheduler& EagerScheduler(const RunConfig& run);

// Installs the adaptive eager scheduler (eager/ calls this; it lives for the
// rest of the process).
void InstallAdaptiveScheduler(Scheduler* scheduler);

// The per-op eager scheduler: each op is synced (compiled, cached, queued) as
// it is traced, and waited for.
Scheduler& PerOpScheduler();

}  // namespace torch_neuron::lazy

// GraphExecutor: turns pending lazy tensors into device data.
//
// At a sync point it takes the pending values of the requested tensors (all live
// ones for mark_step), canonicalizes and hashes their graph, finds the compiled
// program in the in-memory LRU (compiling on a miss), binds the graph's
// parameters, and queues the execution on the device's queue. The tensors point
// at their output buffers at once; reading one waits for it. Errors of a queued
// execution are raised at the next sync point.
//
// Thread-safe for concurrent syncs (the cache and the recompile log are locked),
// though tracing itself is single-threaded per tensor.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "lazy/lazy_tensor.h"

namespace torch_neuron::lazy {

class GraphExecutor {
 public:
  static GraphExecutor& Get();

  // Materializes the pending ones among `tensors` (one graph per device).
  // Raises the first error of earlier queued executions on those devices.
  void Sync(const std::vector<LazyTensorPtr>& tensors);

  // Ends a step: syncs every live pending tensor of `device` (-1: all devices).
  void MarkStep(int device);

  // Waits until everything queued on `device` ran; raises its first error.
  void WaitDevice(int device);

  // The canonical graph that would compute the pending `tensors` (debugging).
  ir::CanonicalGraph PendingGraph(const std::vector<LazyTensorPtr>& tensors) const;

  // Why the last graph compiled although an earlier graph came from the same
  // place ("" if it did not); printed when TORCH_NEURON_DEBUG=1.
  std::string LastRecompileReason() const;

  // Drops every compiled program (tests).
  void ClearCache();

 private:
  GraphExecutor() = default;
  void SyncDevice(int device, const std::vector<LazyTensorPtr>& tensors);
};

}  // namespace torch_neuron::lazy

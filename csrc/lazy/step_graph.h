// StepGraph: a training step captured once and run again without tracing, the
// lazy device's counterpart of a CUDA graph (torch_neuron.NeuronGraph).
//
// Tracing a step costs the main thread about what running it costs on the
// CPU: for a small model, a lazy device that traces every step cannot beat
// eager by much. A captured step keeps the compiled program of the step and
// how to bind it: which tensors feed its inputs and which receive its outputs.
// Replay binds the current values of those tensors and queues the program; no
// Python code and no op dispatch run.
//
// The tensors are found, not declared: Begin gets every live neuron tensor
// (the Python side collects them) and notes which buffer each holds; End
// links each input buffer of the captured graph to the tensor that held it,
// and each output to the tensor that takes it. Like a CUDA graph, the step is
// static: inputs not held by a tensor before the capture (a batch copied to
// the device inside the step, a constant) and Python scalars (a learning
// rate) keep their captured values; random ops draw anew on each replay.
//
// Not thread-safe: use it from the thread that traces.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/container/flat_hash_map.h"
#include "base/config.h"
#include "lazy/graph_executor.h"

namespace torch_neuron::lazy {

class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Runs what is pending on `device`, notes the buffers `state` holds, and
  // starts capturing: until End, syncing the device raises.
  void Begin(int device, const std::vector<at::Tensor>& state);
  // Ends the capture: the step runs once (as mark_step would run it) and is
  // kept. `state` is every live neuron tensor again (the step made some).
  void End(const std::vector<at::Tensor>& state);
  // Ends a capture whose block raised: nothing is kept, traced ops stay pending.
  void Abort();

  // Runs the captured step again on the current values of its tensors. What
  // is pending on the device runs first, as at mark_step. Raises if nothing
  // was captured or an input tensor changed shape or dtype. `trace` and `run`
  // are the settings read at the caller's top (the Python binding).
  void Replay(const TraceConfig& trace, const RunConfig& run);
  // Drops the captured step and the buffers it keeps.
  void Reset();

  bool captured() const { return record_.program != nullptr; }
  bool capturing() const { return device_ >= 0 && !captured(); }
  // The captured graph's inputs fed by tensors, inputs kept as captured,
  // outputs taken by tensors found at the end, and other outputs (temporaries).
  int64_t linked_inputs() const { return static_cast<int64_t>(input_links_.size()); }
  int64_t frozen_inputs() const { return static_cast<int64_t>(frozen_inputs_.size()); }
  int64_t linked_outputs() const { return static_cast<int64_t>(output_links_.size()); }
  int64_t other_outputs() const { return static_cast<int64_t>(other_outputs_.size()); }

 private:
  struct InputLink {
    size_t slot;    // parameter slot of the program
    size_t tensor;  // index into tensors_
    ir::Shape shape;
  };
  struct OutputLink {
    int output;
    size_t tensor;  // index into tensors_
  };

  // The index of `t` in tensors_, added if new.
  size_t Keep(const at::Tensor& t);
  void Clear();

  int device_ = -1;
  // At Begin: each state buffer and the state tensors holding it (the buffer
  // weakly: the capture must not keep buffers alive, or its own run could not
  // donate them).
  struct Holder {
    std::weak_ptr<runtime::DeviceData> data;
    at::Tensor tensor;
  };
  absl::flat_hash_map<const runtime::DeviceData*, std::vector<Holder>> holders_;

  StepRecord record_;                // program, scalar and generator parameters, shapes
  std::vector<at::Tensor> tensors_;  // the user's tensors the step reads or writes
  std::vector<InputLink> input_links_;
  std::vector<std::pair<size_t, runtime::DeviceDataPtr>> frozen_inputs_;
  std::vector<OutputLink> output_links_;
  std::vector<std::pair<int, std::weak_ptr<LazyTensor>>> other_outputs_;
};

}  // namespace torch_neuron::lazy

// CompiledGraph: one ATen graph of a torch.compile(backend="neuron") region,
// at one set of input shapes, traced once into the lazy IR and then run as
// one program per call, with no op dispatched and nothing traced.
//
// The backend (torch_neuron/_compile_backend.py) gets AOTAutograd's forward,
// backward or inference graph. Its first call at given input shapes is traced
// on the lazy path, as the same ops written out would be: the inputs' pending
// values run first (so each input is a buffer and the graph's random ops draw
// after the ones traced before it), the graph runs on the inputs themselves,
// and what it returns and what it writes into its inputs is synced as one
// graph, through the usual canonical hash, caches and compiler. The graph, its
// program and how to bind them are kept: which program input each graph input
// feeds, which program output (or input, or constant) each result is, and the
// layout each result reports. A later call binds the inputs' buffers, queues
// the program on the device and returns new tensors over its output buffers;
// inputs the graph writes take their new values as an in-place op's
// functionalization gives them (the wrapper's value replaced, its views
// brought up to date at their next use, the version counter moved).
//
// While it is traced nothing may run on the device (GraphExecutor's region
// trace): an op that needs its operands' values (the CPU fallback, a read)
// raises, and the backend reports it or runs the graph op by op.
//
// Not thread-safe: use it from the thread that traces (the autograd engine's
// thread for a backward graph, while the caller waits on it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "base/config.h"
#include "lazy/graph_executor.h"
#include "lazy/size_origins.h"
#include "lazy/tensor_impl.h"

namespace torch_neuron::dynamo {

class CompiledGraph {
 public:
  CompiledGraph() = default;
  ~CompiledGraph();
  CompiledGraph(const CompiledGraph&) = delete;
  CompiledGraph& operator=(const CompiledGraph&) = delete;

  // Whether `inputs` can be traced: all neuron tensors of one device (in lazy
  // mode). -1 otherwise, else the device.
  static int TraceableDevice(const std::vector<at::Tensor>& inputs);

  // Runs what `inputs` need and starts the trace: until EndTrace or AbortTrace
  // any sync of the device raises. `size_generic` (a graph whose sizes Dynamo
  // made symbolic): the ops' SymInt arguments are traced as parameters and
  // the graph is compiled size-generic (ir/graph.h), so a trace of the same
  // graph at other sizes finds its program in the caches instead of compiling
  // one; this object still runs the sizes it traced. Returns the tensors to
  // run the graph on: `inputs`, with a stand-in over its own buffer for each
  // functional view among them (what the graph writes into one goes back
  // into the view at EndTrace).
  std::vector<at::Tensor> BeginTrace(int device, const std::vector<at::Tensor>& inputs,
                                     bool size_generic = false);
  // Ends the trace: `outputs` are the graph's tensor results. Runs the graph
  // once, as one program, and keeps it. Returns the results as Run makes them
  // (tensors over the program's output buffers, the inputs' or the kept
  // ones), for the caller to return instead of `outputs`: a traced result
  // that is a view keeps its base's traced value, which a later write or
  // read through the view would trace again on the lazy path.
  std::vector<at::Tensor> EndTrace(const std::vector<at::Tensor>& outputs);
  // Ends a trace that raised: nothing is kept; random ops it traced are
  // dropped (the generator had not drawn for them).
  void AbortTrace();

  // The graph run on `inputs`: its tensor results, or nullopt when the inputs
  // do not fit the trace (a device, shape, dtype or layout, or which inputs
  // share a buffer, differs), for the caller to trace another. `trace` and
  // `run` are the settings read at the caller's top (the Python binding).
  std::optional<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs, const TraceConfig& trace,
                                             const RunConfig& run);

  // Running a size-generic trace's program at other sizes (issue 49). While
  // a size-generic graph is traced, the caller arms the trace's SizeOrigins
  // recorder before each op of its graph with the origins of the op's int
  // arguments (lazy/size_origins.h). After EndTrace, `param_origins` gives
  // each parameter slot's origin: one of the caller's size expressions
  // (>= 0) for a scalar parameter bound from one, kLiteral for the others
  // (buffers, generators, constants of the graph); it is empty where the
  // trace cannot run at other sizes: a parameter of unknown origin, a
  // size-dependent value bound as a constant, or a constant buffer of the
  // trace with a size (origins_blocker says which). The caller also gives
  // each result's layout (result_layouts gives the traced ones, to check). The caller checks the inputs'
  // sizes against its expressions, evaluates them at the new sizes and calls
  // RunAt with each program output's sizes; nullopt where the inputs do not
  // fit (a dtype, rank, device or aliasing differs, an input of its traced
  // sizes has another layout, or a written input of other sizes or the
  // value written into it is not contiguous). The layouts of inputs of other
  // sizes are the caller's to check.
  void ArmOrigins(std::string op, std::vector<std::vector<int64_t>> args);
  const std::vector<int64_t>& param_origins() const { return param_origins_; }
  // Why param_origins is empty (empty when it is not).
  const std::string& origins_blocker() const { return origins_blocker_; }
  // The value scalar parameter `slot` had in the trace (0 for other slots).
  int64_t param_value(size_t slot) const;
  std::vector<std::vector<int64_t>> output_sizes() const;
  // Where each result's value comes from: (kind, index), kind 0 a program
  // output, 1 a graph input, 2 a buffer of the trace; and for each written
  // input, (input, kind, index).
  std::vector<std::pair<int, int64_t>> result_sources() const;
  // Each result's traced strides (empty: contiguous) and storage offset.
  std::vector<std::pair<std::vector<int64_t>, int64_t>> result_layouts() const;
  // A result's sizes, strides and storage offset at the new sizes.
  using ResultLayout = std::tuple<std::vector<int64_t>, std::vector<int64_t>, int64_t>;
  std::vector<std::tuple<int64_t, int, int64_t>> mutation_sources() const;
  std::optional<std::vector<at::Tensor>> RunAt(const std::vector<at::Tensor>& inputs,
                                               const std::vector<std::pair<size_t, int64_t>>& params,
                                               const std::vector<std::vector<int64_t>>& output_sizes,
                                               const std::vector<ResultLayout>& result_layouts,
                                               const TraceConfig& trace, const RunConfig& run);

  bool traced() const { return traced_; }
  bool size_generic() const { return size_generic_; }
  // Program inputs bound from graph inputs, and kept from the trace (constants).
  int64_t linked_inputs() const { return static_cast<int64_t>(input_links_.size()); }
  int64_t frozen_inputs() const { return static_cast<int64_t>(frozen_inputs_.size()); }
  // Graph inputs the graph writes.
  int64_t mutated_inputs() const { return static_cast<int64_t>(mutations_.size()); }

 private:
  // Where a result's value comes from on a call.
  struct Source {
    enum class Kind { kOutput, kInput, kFrozen };
    Kind kind = Kind::kOutput;
    size_t index = 0;               // program output (kOutput) or graph input (kInput)
    runtime::DeviceDataPtr frozen;  // kFrozen: a buffer kept from the trace
    lazy::TensorLayout layout;      // what the result reports
  };
  struct InputSpec {
    ir::Shape shape;
    lazy::TensorLayout layout;
    int alias_of;  // the first input holding the same buffer, or -1
  };

  // Each input's LazyTensor, or nullptr where it is not a neuron tensor of
  // device_; and the first input sharing each one's buffer (after the sync).
  lazy::LazyTensorPtr LazyOf(const at::Tensor& t) const;
  std::vector<lazy::LazyTensorPtr> LazyInputs(const std::vector<at::Tensor>& inputs) const;
  static std::vector<int> AliasPattern(const std::vector<lazy::LazyTensorPtr>& lazy);
  // `layout`: what the result reports, if not the traced one.
  at::Tensor Make(const Source& source, const std::vector<runtime::DeviceDataPtr>& outputs,
                  const std::vector<lazy::LazyTensorPtr>& inputs,
                  const lazy::TensorLayout* layout = nullptr) const;
  // Gives a graph input the value the graph wrote into it.
  static void WriteInput(const at::Tensor& input, const at::Tensor& value);
  // Binds the checked inputs and queues the program with `params` into
  // buffers of `output_shapes`; the results over them.
  std::optional<std::vector<at::Tensor>> Launch(const std::vector<at::Tensor>& inputs,
                                                std::vector<lazy::LazyTensorPtr> lazy,
                                                std::vector<c10::IValue> params,
                                                const std::vector<ir::Shape>& output_shapes,
                                                const std::vector<lazy::TensorLayout>* result_layouts,
                                                const TraceConfig& trace, const RunConfig& run);
  // Fills param_origins_ at the end of a size-generic trace.
  void FindParamOrigins();
  void Clear();

  int device_ = -1;
  bool tracing_ = false;
  bool traced_ = false;
  bool size_generic_ = false;
  bool previous_size_generic_ = false;  // the thread's setting before the trace
  // During the trace: the inputs, and each one's LazyTensor at the start.
  std::vector<lazy::LazyTensorPtr> before_;
  std::vector<at::Tensor> traced_inputs_;  // what the graph runs on
  std::vector<at::Tensor> originals_;      // the caller's inputs

  lazy::StepRecord record_;  // program and its scalar and generator parameters
  std::vector<InputSpec> inputs_;
  std::vector<std::pair<size_t, size_t>> input_links_;  // program slot, graph input
  std::vector<std::pair<size_t, runtime::DeviceDataPtr>> frozen_inputs_;
  std::vector<Source> results_;
  std::vector<std::pair<size_t, Source>> mutations_;  // graph input, its new value

  // A size-generic trace's recorder, installed while it is traced, and the
  // thread's recorder before it.
  std::unique_ptr<lazy::SizeOrigins> origins_;
  lazy::SizeOrigins* previous_origins_ = nullptr;
  std::vector<int64_t> param_origins_;  // see param_origins()
  std::string origins_blocker_;
};

}  // namespace torch_neuron::dynamo

#include "lazy/graph_executor.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <tuple>
#include <map>

#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/config.h"
#include "base/metrics.h"
#include "lazy/compile_report.h"
#include "lazy/executable_cache.h"
#include "lazy/graph_growth.h"
#include "lazy/ran_values.h"
#include "lazy/execution_mode.h"
#include "lazy/scheduler.h"
#include "runtime/device_registry.h"
#include "runtime/execution_queue.h"
#include "runtime/launch.h"
#include "runtime/generator.h"
#include "base/profiler.h"
#include "runtime/kernel_team.h"
#include "runtime/torch_profiler.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

using Clock = std::chrono::steady_clock;

using metrics::NanosSince;

struct ExecutorMetrics {
  metrics::Counter* mark_steps = metrics::GetCounter("mark_step.count");
  metrics::Counter* syncs = metrics::GetCounter("graph.sync.count");
  metrics::Counter* execute_errors = metrics::GetCounter("graph.execute.errors");
  metrics::Counter* prepare_ns = metrics::GetCounter("graph.prepare.ns");
};

const ExecutorMetrics& ExecCounters() {
  static const ExecutorMetrics* counters = new ExecutorMetrics();
  return *counters;
}

absl::Status FailAll(const std::vector<runtime::DeviceDataPtr>& outputs, const absl::Status& status) {
  ExecCounters().execute_errors->Add(1);
  return runtime::FailOutputs(outputs, status);
}

// Context for an error of the graph's own execution: the sync that launched
// the graph (an input's error came from an earlier graph and names its own).
std::string LaunchedAt(const std::string& launched_at) {
  return launched_at.empty() ? "" : absl::StrCat("in the graph launched by the sync at ", launched_at);
}

// Runs on the device's queue. Whatever goes wrong becomes the graph's error:
// every output not yet written fails with it, so readers raise it at their
// sync, and nothing thrown here can reach the queue thread's top (which would
// terminate the process).
absl::Status RunGraph(const std::shared_ptr<const runtime::Program>& program, std::vector<c10::IValue> params,
                      std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs,
                      const std::vector<runtime::DeviceDataPtr>& outputs,
                      const std::optional<std::string>& source, const std::string& launched_at) {
  try {
    profiler::Scope scope(
        "execute", [&] { return absl::StrCat("graph (", program->num_nodes, " nodes)"); },
        source ? std::string_view(*source) : std::string_view());
    absl::Status status = runtime::Launch(*program, std::move(params), std::move(inputs), outputs,
                                          source ? &*source : nullptr, LaunchedAt(launched_at));
    if (!status.ok()) ExecCounters().execute_errors->Add(1);
    return status;
  } catch (...) {
    return FailAll(outputs, WithTrailingContext(
                                WithContext(runtime::StatusFromCurrentException(), "neuron execution failed"),
                                LaunchedAt(launched_at)));
  }
}

// The graph's parameters: scalars and generators by value, device data as
// (slot, buffer) pairs bound when the execution runs.
void BindParameters(const ir::CanonicalGraph& g, std::vector<c10::IValue>* params,
                    std::vector<std::pair<size_t, runtime::DeviceDataPtr>>* inputs) {
  params->assign(g.parameters.size(), c10::IValue());
  for (size_t i = 0; i < g.parameters.size(); ++i) {
    const ir::Node* n = g.nodes[g.parameters[i]];
    switch (n->kind()) {
      case ir::NodeKind::kDeviceData:
        inputs->emplace_back(i, static_cast<const DeviceDataLeaf*>(n->data().get())->data);
        break;
      case ir::NodeKind::kGenerator:
        (*params)[i] = static_cast<const GeneratorLeaf*>(n->data().get())->generator;
        break;
      default:
        (*params)[i] = n->scalar();
        break;
    }
  }
}

std::vector<runtime::DeviceDataPtr> MakeOutputs(int device, const ir::CanonicalGraph& g) {
  std::vector<runtime::DeviceDataPtr> outputs;
  outputs.reserve(g.outputs.size());
  for (const auto& [node, index] : g.outputs) {
    const ir::Shape& shape = g.nodes[node]->shape(index);
    outputs.push_back(std::make_shared<runtime::DeviceData>(device, shape.dtype(), shape.sizes()));
  }
  return outputs;
}

// Compiles (or finds) `g`'s program, a tier-0 stand-in while tier 1 compiles
// unless `tiered` is false (a captured step keeps the program it records); on
// failure the outputs take the error as their value, so reading one raises it
// again and later syncs (a reseed syncs all pending tensors) do not retry a
// graph that cannot compile.
absl::StatusOr<std::shared_ptr<const runtime::Program>> ProgramOrFail(
    const ir::CanonicalGraph& g, const std::vector<runtime::DeviceDataPtr>& outputs, bool* compiled,
    bool tiered = true) {
  absl::StatusOr<std::shared_ptr<const runtime::Program>> program =
      tiered ? FindOrCompileTiered(g, compiled) : FindOrCompile(g, compiled);
  if (!program.ok()) runtime::FailOutputs(outputs, program.status());
  return program;
}

// Eager mode: the scheduler runs what it holds on `device` before a sync.
void BeforeSync(int device, bool step_end, const RunConfig& run) {
  if (CurrentMode() == ExecutionMode::kEager) EagerScheduler(run).BeforeSync(device, step_end);
}

}  // namespace

// What a sync needs of the config: each public entry of the executor (the top
// of a sync) reads it here once and passes it down, so a sync runs with one
// set of settings and nothing below reads the config.
GraphExecutor::Settings GraphExecutor::CurrentSettings() {
  const Config& config = GlobalConfig();
  return Settings{config.trace, config.run};
}

GraphExecutor& GraphExecutor::Get() {
  static GraphExecutor* executor = [] {
    auto* e = new GraphExecutor();
    // Reseeding or reading a neuron generator first runs the random ops traced
    // so far, so they draw from the state they were traced against.
    runtime::SetGeneratorSyncHook([e](c10::DeviceIndex device) {
      const int count = runtime::DeviceRegistry::Global().device_count();
      if (device < 0 || device >= count) return;
      const Settings settings = CurrentSettings();
      BeforeSync(device, false, settings.run);
      std::vector<LazyTensorPtr> pending = PendingTensors(device);
      if (!pending.empty() || HasPendingDraws(device)) e->SyncDevice(settings, device, pending);
      e->DrainDevice(device);
    });
    return e;
  }();
  return *executor;
}

void GraphExecutor::Sync(const std::vector<LazyTensorPtr>& tensors) {
  const Settings settings = CurrentSettings();
  if (CurrentMode() == ExecutionMode::kEager) {
    std::set<int> devices;
    for (const LazyTensorPtr& t : tensors) {
      if (t) devices.insert(t->device());
    }
    for (int device : devices) BeforeSync(device, false, settings.run);
  }
  RunByDevice(settings, tensors, /*read=*/true);
}

namespace {

// A read (.item(), .cpu(), printing) runs the graph its tensors need, and
// code that reads values without mark_step (generate()'s stopping criteria,
// logging) must not compute anything twice. So the read's graph also gives:
//  - every other live tensor of `device` whose value it computes on the way
//    (joins `tensors`): generate()'s KV cache, reached by each token's read;
//  - the values it computes that a pending live tensor it does not reach
//    reads (returned; SyncDevice records them as run, so later graphs read
//    their buffers): the attention mask that generate() grows after the read
//    it needs, which would otherwise stay a chain of concatenations from the
//    first token.
// A backward op asked not to compute an output (output_mask) has an
// Undefined one, which cannot be a graph output: such a node is recomputed.
bool HasOnlyDefinedOutputs(const ir::Node& node) {
  for (int k = 0; k < node.num_outputs(); ++k) {
    if (node.shape(k).dtype() == c10::ScalarType::Undefined) return false;
  }
  return true;
}

std::vector<ir::NodePtr> AddWhatTheReadComputes(int device, std::vector<LazyTensorPtr>* tensors) {
  std::vector<LazyTensorPtr> live = PendingTensors(device);
  if (live.size() <= tensors->size()) return {};
  const RanValues& ran = RanValues::Global();
  absl::flat_hash_set<const ir::Node*> reached;
  std::vector<const ir::Node*> stack;
  for (const LazyTensorPtr& t : *tensors) stack.push_back(t->pending().node.get());
  while (!stack.empty()) {
    const ir::Node* node = stack.back();
    stack.pop_back();
    // A node that ran is read from its results: its operands are not computed.
    if (!reached.insert(node).second || ran.HasRun(*node)) continue;
    for (const ir::Value& operand : node->operands()) stack.push_back(operand.node.get());
  }
  absl::flat_hash_set<const LazyTensor*> asked;
  for (const LazyTensorPtr& t : *tensors) asked.insert(t.get());
  std::vector<const ir::Node*> unreached;
  for (LazyTensorPtr& t : live) {
    if (asked.contains(t.get())) continue;
    if (reached.contains(t->pending().node.get())) {
      tensors->push_back(std::move(t));
    } else {
      unreached.push_back(t->pending().node.get());
    }
  }
  // The reached ops that unreached nodes read, found by walking down from
  // those nodes to where they meet the read's graph.
  std::vector<ir::NodePtr> frontier;
  absl::flat_hash_set<const ir::Node*> seen;
  while (!unreached.empty()) {
    const ir::Node* node = unreached.back();
    unreached.pop_back();
    if (!seen.insert(node).second || ran.HasRun(*node)) continue;
    for (const ir::Value& operand : node->operands()) {
      const ir::Node* next = operand.node.get();
      if (!reached.contains(next)) {
        unreached.push_back(next);
      } else if (next->kind() == ir::NodeKind::kOp && !ran.HasRun(*next) && HasOnlyDefinedOutputs(*next) &&
                 seen.insert(next).second) {
        frontier.push_back(operand.node);
      }
    }
  }
  return frontier;
}

}  // namespace

void GraphExecutor::RunNow(const std::vector<LazyTensorPtr>& tensors) {
  RunByDevice(CurrentSettings(), tensors, /*read=*/false);
}

void GraphExecutor::RunByDevice(const Settings& settings, const std::vector<LazyTensorPtr>& tensors,
                                bool read) {
  std::map<int, std::vector<LazyTensorPtr>> by_device;
  for (const LazyTensorPtr& t : tensors) {
    if (t && t->is_pending()) by_device[t->device()].push_back(t);
  }
  for (auto& [device, list] : by_device) {
    std::vector<ir::NodePtr> keep;
    if (read) keep = AddWhatTheReadComputes(device, &list);
    SyncDevice(settings, device, list, nullptr, /*partial=*/true, /*only_if_cached=*/false, keep);
  }
}

void GraphExecutor::MarkStep(int device) {
  ExecCounters().mark_steps->Add(1);
  const Settings settings = CurrentSettings();
  const int count = runtime::DeviceRegistry::Global().device_count();
  for (int d = 0; d < count; ++d) {
    if (device >= 0 && d != device) continue;
    CheckNotCapturing(d, "mark_step");
    BeforeSync(d, true, settings.run);
    std::vector<LazyTensorPtr> pending = PendingTensors(d);
    if (!pending.empty() || HasPendingDraws(d)) {
      SyncDevice(settings, d, pending);
    } else {
      runtime::ThrowIfError(runtime::ExecutionQueue::ForDevice(d).TakeError());
    }
  }
}

std::vector<int> GraphExecutor::QueuePendingWork() {
  const Settings settings = CurrentSettings();
  std::vector<int> queued;
  const int count = runtime::DeviceRegistry::Global().device_count();
  for (int d = 0; d < count; ++d) {
    {
      absl::MutexLock lock(&mu_);
      if (capturing_.count(d) != 0) continue;
    }
    if (runtime::ExecutionQueue::ForDevice(d).HasError()) continue;
    BeforeSync(d, false, settings.run);  // not a step's end
    std::vector<LazyTensorPtr> pending = PendingTensors(d);
    if (!pending.empty() || HasPendingDraws(d)) SyncDevice(settings, d, pending);
    queued.push_back(d);
  }
  return queued;
}

void GraphExecutor::WaitDevice(int device) {
  BeforeSync(device, false, CurrentSettings().run);
  DrainDevice(device);
}

void GraphExecutor::DrainDevice(int device) {
  runtime::ExecutionQueue& queue = runtime::ExecutionQueue::ForDevice(device);
  queue.Drain();
  runtime::ThrowIfError(queue.TakeError());
}

void GraphExecutor::CheckNotCapturing(int device, const char* what) const {
  absl::MutexLock lock(&mu_);
  auto it = capturing_.find(device);
  if (it == capturing_.end()) return;
  TORCH_CHECK(it->second != Capture::kStep, what, " on neuron:", device,
              " while a step is being captured (torch_neuron.graph): a captured step must stay "
              "one graph, so move .item(), .cpu(), printing, mark_step, reseeding and ops that "
              "run on the CPU fallback out of the captured block");
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, what, " on neuron:", device,
      " inside a torch.compile(backend=\"neuron\") region: the region must compile as one graph, and "
      "this op needs its operands' values now (it runs on the CPU fallback, or reads a value). Move "
      "it out of the compiled code, or set TORCH_NEURON_COMPILE_FALLBACK=1 to run such regions op by "
      "op on the lazy path");
}

void GraphExecutor::BeginCaptureOf(int device, Capture what) {
  absl::MutexLock lock(&mu_);
  auto [it, fresh] = capturing_.emplace(device, what);
  TORCH_CHECK(fresh, "neuron:", device,
              it->second == Capture::kStep ? " is already capturing a step (torch_neuron.graph)"
                                           : " is tracing a torch.compile region",
              "; captures do not nest");
}

void GraphExecutor::BeginCapture(int device) {
  {
    absl::MutexLock lock(&mu_);
    TORCH_CHECK(capturing_.count(device) == 0, "neuron:", device,
                " is already capturing a step; captures do not nest");
  }
  MarkStep(device);
  BeginCaptureOf(device, Capture::kStep);
}

bool GraphExecutor::IsCapturing(int device) const {
  absl::MutexLock lock(&mu_);
  return capturing_.count(device) != 0;
}

void GraphExecutor::EndCapture(int device) {
  absl::MutexLock lock(&mu_);
  capturing_.erase(device);
}

void GraphExecutor::BeginRegionTrace(int device) { BeginCaptureOf(device, Capture::kRegion); }

void GraphExecutor::EndRegionTrace(int device) { EndCapture(device); }

void GraphExecutor::SyncRegionInputs(int device, const std::vector<LazyTensorPtr>& inputs) {
  std::vector<LazyTensorPtr> pending;
  for (const LazyTensorPtr& t : inputs) {
    if (t->is_pending()) pending.push_back(t);
  }
  if (pending.empty() && !HasPendingDraws(device)) {
    runtime::ThrowIfError(runtime::ExecutionQueue::ForDevice(device).TakeError());
    return;
  }
  // As a read: what the inputs' graph computes for other live tensors comes
  // along, or code between regions (generate()'s attention mask, its
  // finished sequences) would grow a chain that every call recompiles.
  std::vector<ir::NodePtr> keep = AddWhatTheReadComputes(device, &pending);
  SyncDevice(CurrentSettings(), device, pending, nullptr, /*partial=*/true, /*only_if_cached=*/false, keep);
}

void GraphExecutor::CompileRegion(int device, const std::vector<LazyTensorPtr>& roots, StepRecord* record,
                                  bool size_generic) {
  SyncDevice(CurrentSettings(), device, roots, record, /*partial=*/true, /*only_if_cached=*/false,
             /*keep=*/{}, size_generic);
}

void GraphExecutor::CaptureStep(int device, StepRecord* record) {
  ExecCounters().mark_steps->Add(1);
  SyncDevice(CurrentSettings(), device, PendingTensors(device), record);
}

namespace {

// Whether a root of the graph, or a buffer it reads, has sizes from data.
bool HoldsSizesFromData(const std::vector<LazyTensorPtr>& roots, const ir::CanonicalGraph& g) {
  for (const LazyTensorPtr& t : roots) {
    if (t->size_from_data()) return true;
  }
  for (const int32_t i : g.parameters) {
    const ir::Node& leaf = *g.nodes[i];
    if (leaf.kind() == ir::NodeKind::kDeviceData && LeafSizeFromData(leaf)) return true;
  }
  return false;
}

}  // namespace

bool GraphExecutor::SyncDevice(const Settings& settings, int device,
                               const std::vector<LazyTensorPtr>& tensors, StepRecord* record, bool partial,
                               bool only_if_cached, const std::vector<ir::NodePtr>& keep, bool size_generic) {
  if (record == nullptr) CheckNotCapturing(device, "a sync");
  runtime::ExecutionQueue& queue = runtime::ExecutionQueue::ForDevice(device);
  runtime::ThrowIfError(queue.TakeError());
  auto start = Clock::now();

  std::vector<ir::Value> roots;
  roots.reserve(tensors.size());
  for (const LazyTensorPtr& t : tensors) roots.push_back(t->pending());
  // Draws not yet run come along, first and in trace order, as outputs: their
  // results become the leaves later graphs read.
  std::vector<ir::NodePtr> draws = TakePendingDraws(device);
  std::vector<ir::Value> ordered;
  for (const ir::NodePtr& draw : draws) {
    if (RanValues::Global().HasRun(*draw)) continue;
    for (int k = 0; k < draw->num_outputs(); ++k) ordered.push_back(ir::Value{draw, k});
  }
  // Values computed here that later graphs read: outputs too, recorded as run
  // with the draws (a draw among them is already there).
  for (const ir::NodePtr& node : keep) {
    if (std::find(draws.begin(), draws.end(), node) != draws.end()) continue;
    for (int k = 0; k < node->num_outputs(); ++k) ordered.push_back(ir::Value{node, k});
  }
  // Lazy mode's graphs with TORCH_NEURON_DYNAMIC_SHAPES: size-generic, as a
  // region whose sizes are symbolic (a captured step keeps its sizes).
  if (record == nullptr && settings.trace.dynamic_shapes && CurrentMode() == ExecutionMode::kLazy) {
    size_generic = true;
  }
  ir::CanonicalGraph g = CanonicalizeResolved(roots, ordered, size_generic);
  // A lazy graph that reads or makes a tensor whose sizes came from data
  // (lazy_tensor.h size_from_data): size-generic, so the next count finds
  // this graph's program (its ops took their sizes as parameters).
  if (ABSL_PREDICT_FALSE(SizesFromDataSeen()) && !g.size_generic && record == nullptr &&
      CurrentMode() == ExecutionMode::kLazy && HoldsSizesFromData(tensors, g)) {
    g = CanonicalizeResolved(roots, ordered, /*size_generic=*/true);
  }
  std::shared_ptr<const runtime::Program> program;
  if (only_if_cached) {
    program = FindInMemory(g);
    if (program == nullptr) {
      for (ir::NodePtr& draw : draws) AddPendingDraw(device, std::move(draw));  // back, in order
      return false;
    }
  }
  ExecCounters().syncs->Add(1);

  std::vector<c10::IValue> params;
  std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs;
  BindParameters(g, &params, &inputs);
  std::vector<runtime::DeviceDataPtr> outputs = MakeOutputs(device, g);
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i]->SetData(outputs[g.root_to_output[i]]);
  for (size_t j = 0; j < ordered.size();) {
    const ir::NodePtr& draw = ordered[j].node;
    std::vector<ir::NodePtr> leaves;
    for (int k = 0; k < draw->num_outputs(); ++k, ++j) {
      const runtime::DeviceDataPtr& data = outputs[g.root_to_output[tensors.size() + j]];
      leaves.push_back(ir::Node::MakeDeviceData(draw->shape(k), std::make_shared<DeviceDataLeaf>(data)));
    }
    RanValues::Global().Record(draw, std::move(leaves));
  }

  bool compiled = false;
  if (program == nullptr) {
    // A size-generic graph compiles at tier 0 only: nothing to tier.
    program = runtime::ValueOrThrow(
        ProgramOrFail(g, outputs, &compiled, /*tiered=*/record == nullptr && !g.size_generic));
  }
  ExecCounters().prepare_ns->Add(NanosSince(start));
  if (compiled && partial) {
    // Only compiles ask where the sync came from: walking Python frames costs
    // far less than a compile, and nothing on a cached sync.
    const std::string warning = GraphGrowthWatch::Global().NoteCompile(CurrentSourceLocation(), g);
    if (!warning.empty()) TORCH_WARN(warning);
  }
  if (record != nullptr) {
    record->program = program;
    record->params = params;
    record->inputs = inputs;
    for (const auto& [slot, data] : inputs) {
      record->input_shapes.push_back(g.nodes[g.parameters[slot]]->shape(0));
    }
    for (const auto& [node, index] : g.outputs) {
      record->output_shapes.push_back(g.nodes[node]->shape(index));
    }
    record->parameter_nodes.clear();
    for (const int32_t i : g.parameters) record->parameter_nodes.push_back(g.nodes[i]);
    record->roots = tensors;
    record->root_to_output.assign(g.root_to_output.begin(),
                                  g.root_to_output.begin() + static_cast<long>(tensors.size()));
  }

  // The job owns the only references the graph keeps to its inputs. The IR
  // (pinned by `g`, also held by the roots and draws) holds more, its
  // device-data leaves: the job releases it on the queue before it runs, so
  // the executor sees the inputs only the job holds and donates their buffers
  // (runtime::Launch); the tracing thread does not pay for freeing the nodes.
  std::vector<ir::NodePtr> graph_ir = std::move(g.pinned);
  roots.clear();
  ordered.clear();
  draws.clear();
  RanValues::Global().Sweep();  // draws whose tensors are gone
  // The program's own lines where they are this graph's: recorded for it
  // (TORCH_NEURON_IR_DEBUG), or a group of eager mode compiled from its first
  // occurrence, whose lines a loop repeats.
  std::optional<std::string> source;
  std::string launched_at;
  if (CurrentMode() != ExecutionMode::kEager) {
    if (!settings.trace.ir_debug) source = "";
    // Its errors name this sync's line (in eager mode each op names its own).
    // A walk of the Python frames: about a microsecond.
    launched_at = CurrentSourceLocation();
  }
  Launch(device, settings.run, std::move(program), std::move(params), std::move(inputs), std::move(outputs),
         std::move(source), std::move(launched_at), std::move(graph_ir));
  return true;
}

bool GraphExecutor::RunPendingIfCached(int device) {
  return SyncDevice(CurrentSettings(), device, PendingTensors(device), nullptr, false,
                    /*only_if_cached=*/true);
}

void GraphExecutor::RunNodes(int device, const std::vector<ir::NodePtr>& nodes,
                             const std::vector<LazyTensorPtr>* bind) {
  CheckNotCapturing(device, "a sync");
  runtime::ThrowIfError(runtime::ExecutionQueue::ForDevice(device).TakeError());
  const RunConfig run = CurrentSettings().run;
  const bool had_draws = HasPendingDraws(device);
  for (const ir::NodePtr& node : nodes) {
    if (RanValues::Global().HasRun(*node)) continue;
    ExecCounters().syncs->Add(1);
    auto start = Clock::now();
    std::vector<ir::Value> roots;
    for (int k = 0; k < node->num_outputs(); ++k) {
      if (node->shape(k).dtype() != c10::ScalarType::Undefined) roots.push_back(ir::Value{node, k});
    }
    ir::CanonicalGraph g = CanonicalizeResolved(roots);
    std::vector<c10::IValue> params;
    std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs;
    BindParameters(g, &params, &inputs);
    std::vector<runtime::DeviceDataPtr> outputs = MakeOutputs(device, g);
    std::vector<ir::NodePtr> leaves;
    size_t r = 0;
    for (int k = 0; k < node->num_outputs(); ++k) {
      // An undefined output is never read; its leaf only keeps the indices.
      runtime::DeviceDataPtr data =
          node->shape(k).dtype() == c10::ScalarType::Undefined ? nullptr : outputs[g.root_to_output[r++]];
      leaves.push_back(ir::Node::MakeDeviceData(node->shape(k), std::make_shared<DeviceDataLeaf>(data)));
    }
    RanValues::Global().Record(node, std::move(leaves));
    std::shared_ptr<const runtime::Program> program =
        runtime::ValueOrThrow(ProgramOrFail(g, outputs, nullptr));
    ExecCounters().prepare_ns->Add(NanosSince(start));
    roots.clear();
    g.pinned.clear();
    Launch(device, run, std::move(program), std::move(params), std::move(inputs), std::move(outputs),
           node->source());
  }
  // Tensors whose values ran take their buffers.
  for (const LazyTensorPtr& t : bind != nullptr ? *bind : PendingTensors(device)) {
    if (!t->is_pending()) continue;
    const ir::Value v = RanValues::Global().Resolve(t->pending());
    if (v.node->kind() != ir::NodeKind::kDeviceData) continue;
    if (const runtime::DeviceDataPtr* buffer = LeafBuffer(*v.node)) t->SetData(*buffer);
  }
  if (had_draws) {
    // Draws that ran leave the list; the others keep their order.
    for (ir::NodePtr& draw : TakePendingDraws(device)) {
      if (!RanValues::Global().HasRun(*draw)) AddPendingDraw(device, std::move(draw));
    }
  }
  RanValues::Global().Sweep();
}

void GraphExecutor::Launch(int device, const RunConfig& run, std::shared_ptr<const runtime::Program> program,
                           std::vector<c10::IValue> params,
                           std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs,
                           std::vector<runtime::DeviceDataPtr> outputs, std::optional<std::string> source,
                           std::string launched_at, std::vector<ir::NodePtr> graph_ir) {
  runtime::ExecutionQueue& queue = runtime::ExecutionQueue::ForDevice(device);
  auto job = std::make_shared<
      std::tuple<std::vector<c10::IValue>, std::vector<std::pair<size_t, runtime::DeviceDataPtr>>,
                 std::vector<ir::NodePtr>>>(std::move(params), std::move(inputs), std::move(graph_ir));
  // The kernel team's size is the sync's setting when the graph is queued:
  // the queue thread does not read the config (a test's override may change
  // it meanwhile).
  queue.Enqueue([program = std::move(program), job, outputs = std::move(outputs),
                 threads = run.kernel_threads, source = std::move(source),
                 launched_at = std::move(launched_at), listeners = runtime::CaptureTorchListeners()]() {
    std::get<2>(*job).clear();                         // the graph's IR, before donation is decided
    runtime::ScopedTorchListeners carried(listeners);  // torch.profiler, if it listens
    runtime::ScopedKernelThreads team(threads);
    return RunGraph(program, std::move(std::get<0>(*job)), std::move(std::get<1>(*job)), outputs, source,
                    launched_at);
  });
  if (run.launch_blocking) DrainDevice(device);
}

ir::CanonicalGraph GraphExecutor::PendingGraph(const std::vector<LazyTensorPtr>& tensors) const {
  std::vector<ir::Value> roots;
  for (const LazyTensorPtr& t : tensors) {
    if (t && t->is_pending()) roots.push_back(t->pending());
  }
  return CanonicalizeResolved(roots);
}

std::string GraphExecutor::LastRecompileReason() const { return lazy::LastRecompileReason(); }

void GraphExecutor::ClearCache() {
  EagerScheduler(CurrentSettings().run).OnCacheCleared();
  ClearMemoryCache();
}

}  // namespace torch_neuron::lazy

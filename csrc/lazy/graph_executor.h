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

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "base/config.h"
#include "ir/graph.h"
#include "lazy/lazy_tensor.h"
#include "runtime/program.h"

namespace torch_neuron::lazy {

// What a sync made while capturing a step (lazy/step_graph.h) hands back: the
// compiled program and how to bind it again without tracing. The record holds
// the graph's input buffers and root tensors only until the capture has linked
// them to the tensors that will feed and receive the next runs.
struct StepRecord {
  std::shared_ptr<const runtime::Program> program;
  // The graph's parameters; device-data slots hold nothing (see inputs).
  std::vector<c10::IValue> params;
  // Parameter slot and the buffer it read, with the buffer's shape.
  std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs;
  std::vector<ir::Shape> input_shapes;
  std::vector<ir::Shape> output_shapes;
  // Each parameter slot's leaf, to compare with leaves held elsewhere (a
  // SizeOrigins recorder's): not owned, and may dangle once the sync returned.
  std::vector<const ir::Node*> parameter_nodes;
  // The tensors synced and the output each one took.
  std::vector<LazyTensorPtr> roots;
  std::vector<int> root_to_output;
};

class GraphExecutor {
 public:
  static GraphExecutor& Get();

  // Materializes the pending ones among `tensors` (one graph per device).
  // Raises the first error of earlier queued executions on those devices. In
  // eager mode the scheduler first runs what it holds back on their devices.
  void Sync(const std::vector<LazyTensorPtr>& tensors);

  // Ends a step: syncs every live pending tensor of `device` (-1: all devices).
  void MarkStep(int device);

  // Waits until everything queued on `device` ran; raises its first error.
  void WaitDevice(int device);

  // Queues everything traced on every device, as mark_step does, for a change
  // of process state that queued kernels read when they run (torch's default
  // dtype): returns the devices whose queues the caller then drains. A device
  // capturing a step, or with an error kept for its next sync, is left as it
  // is (that sync raises the error); a compile error is raised here.
  std::vector<int> QueuePendingWork();

  // For schedulers (lazy/scheduler.h), which must not be asked again:
  // Sync and WaitDevice without consulting the scheduler.
  void RunNow(const std::vector<LazyTensorPtr>& tensors);
  void DrainDevice(int device);
  // Syncs every pending tensor of `device` as one graph if its program is in
  // the in-memory cache, and returns true; otherwise changes nothing and
  // returns false.
  bool RunPendingIfCached(int device);
  // Runs each of `nodes` (in order, each one op's node) as a graph of its own
  // whose operands are read through the nodes run before it: afterwards every
  // node is materialized (Node::materialized), and the pending tensors of
  // `bind` (default: every pending tensor of `device`) whose values they
  // computed hold the results. Draws among them leave the device's pending
  // draws.
  void RunNodes(int device, const std::vector<ir::NodePtr>& nodes,
                const std::vector<LazyTensorPtr>* bind = nullptr);

  // The canonical graph that would compute the pending `tensors` (debugging).
  ir::CanonicalGraph PendingGraph(const std::vector<LazyTensorPtr>& tensors) const;

  // Why the last graph compiled although an earlier graph came from the same
  // place ("" if it did not); printed when TORCH_NEURON_DEBUG=1.
  std::string LastRecompileReason() const;

  // Drops every compiled program (tests).
  void ClearCache();

  // Capturing a step on `device`: until EndCapture, any sync of the device
  // other than CaptureStep (mark_step, .item(), an op run on the CPU fallback,
  // reseeding) raises, since the step must stay one graph. BeginCapture first
  // runs what is pending; raises if the device is already capturing.
  void BeginCapture(int device);
  void EndCapture(int device);
  bool IsCapturing(int device) const;
  // Before a read of a value of `device` (.item(), .tolist(), .cpu()): raises
  // while the device is capturing a step or tracing a region, even when the
  // value is at hand (an input's buffer), since the graph would keep the value
  // read at trace time as a constant (a custom op's kernel looping over
  // offsets.tolist()).
  void CheckReadAllowed(int device) const { CheckNotCapturing(device, "a read of a value"); }
  // Syncs everything pending on the capturing `device` like mark_step and
  // fills `record` to run the same graph again.
  void CaptureStep(int device, StepRecord* record);

  // A torch.compile region traced on `device` (dynamo/compiled_graph.h): as a
  // capture, any sync of the device until EndRegionTrace raises (the region
  // must be one graph), but nothing runs first and the message names the
  // region. SyncRegionInputs runs what `inputs` (and the random ops traced so
  // far) need, as a read does, so that each holds a buffer and the region's
  // draws come after the ones before it; CompileRegion syncs `roots` (what the region computed,
  // and the random ops it traced) as one graph and fills `record`; a
  // size-generic region's graph (traced with SetSizeGenericTrace) is
  // canonicalized as one (ir/graph.h), so its program serves every size.
  void BeginRegionTrace(int device);
  void EndRegionTrace(int device);
  void SyncRegionInputs(int device, const std::vector<LazyTensorPtr>& inputs);
  void CompileRegion(int device, const std::vector<LazyTensorPtr>& roots, StepRecord* record,
                     bool size_generic = false);

  // Queues `program` on `device` with `params` (device-data slots bound from
  // `inputs`), fulfilling `outputs` through runtime::Launch, which decides
  // donation: an input's buffer nothing but the job holds may take an output
  // the program's signature allows (runtime/launch.h). `source` is the user's line its errors name
  // ("": none; nullopt: the lines the program was compiled with).
  // `run` is the caller's settings (kernel threads, launch blocking), read at
  // its top. `launched_at` is the user's line of the sync that launched it ("": none):
  // an execution error surfaces at a later sync, perhaps in other code, and
  // names this one. `graph_ir` is the graph's IR, which the job releases on
  // the queue before it runs: freeing a large graph's nodes costs about as
  // much as canonicalizing them, and the queue, idle while the next step
  // traces, pays for it instead of the tracing thread. Released before
  // Launch decides donation, so the IR never keeps a buffer from being donated.
  void Launch(int device, const RunConfig& run, std::shared_ptr<const runtime::Program> program,
              std::vector<c10::IValue> params, std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs,
              std::vector<runtime::DeviceDataPtr> outputs, std::optional<std::string> source = "",
              std::string launched_at = "", std::vector<ir::NodePtr> graph_ir = {});

 private:
  GraphExecutor() = default;
  // What a sync needs of the config, read once at each public entry.
  struct Settings {
    TraceConfig trace;
    RunConfig run;
  };
  static Settings CurrentSettings();
  // `partial`: a sync of some tensors (.item(), .cpu()), not of the step.
  // `only_if_cached`: return false, changing nothing, when the graph's program
  // is not in memory (else it runs: true).
  // `keep`: nodes the graph computes that later graphs read; they become
  // outputs too, recorded as run (RanValues), so those graphs read their results.
  // `size_generic`: canonicalize as a size-generic graph (CompileRegion).
  bool SyncDevice(const Settings& settings, int device, const std::vector<LazyTensorPtr>& tensors,
                  StepRecord* record = nullptr, bool partial = false, bool only_if_cached = false,
                  const std::vector<ir::NodePtr>& keep = {}, bool size_generic = false);
  void CheckNotCapturing(int device, const char* what) const;
  // Syncs the pending ones among `tensors`, a graph per device; a `read`
  // (Sync: .item(), .cpu(), printing) also materializes what its graph computes
  // for other live tensors (graph_executor.cc, AddWhatTheReadComputes), a
  // scheduler's RunNow does not.
  void RunByDevice(const Settings& settings, const std::vector<LazyTensorPtr>& tensors, bool read);

  // What is being captured on a device: a step (torch_neuron.graph) or a
  // torch.compile region; each raises its own message at a sync.
  enum class Capture { kStep, kRegion };
  void BeginCaptureOf(int device, Capture what);

  mutable absl::Mutex mu_;
  std::map<int, Capture> capturing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torch_neuron::lazy

#include "lazy/step_graph.h"

#include <algorithm>
#include <optional>
#include <string>

#include "base/config.h"
#include "base/metrics.h"
#include "lazy/bridge.h"
#include "lazy/execution_mode.h"
#include "runtime/execution_queue.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

metrics::Counter* Replays() {
  static metrics::Counter* counter = metrics::GetCounter("step_graph.replay.count");
  return counter;
}

// The LazyTensor behind each of `state` on `device` (views brought up to date
// first), nullptr for the others.
std::vector<LazyTensorPtr> LazyOn(int device, const std::vector<at::Tensor>& state) {
  std::vector<LazyTensorPtr> out;
  out.reserve(state.size());
  for (const at::Tensor& t : state) {
    LazyTensorPtr lazy = TryGetLazy(t);
    out.push_back(lazy != nullptr && lazy->device() == device ? std::move(lazy) : nullptr);
  }
  return out;
}

}  // namespace

StepGraph::~StepGraph() {
  if (capturing()) GraphExecutor::Get().EndCapture(device_);
}

void StepGraph::Clear() {
  device_ = -1;
  holders_.clear();
  record_ = StepRecord();
  tensors_.clear();
  input_links_.clear();
  frozen_inputs_.clear();
  output_links_.clear();
  other_outputs_.clear();
}

void StepGraph::Reset() {
  TORCH_CHECK(!capturing(), "reset() during the capture of a step");
  Clear();
}

size_t StepGraph::Keep(const at::Tensor& t) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].is_same(t)) return i;
  }
  tensors_.push_back(t);
  return tensors_.size() - 1;
}

void StepGraph::Begin(int device, const std::vector<at::Tensor>& state) {
  TORCH_CHECK(!capturing(), "this graph is already capturing a step");
  TORCH_CHECK(CurrentMode() == ExecutionMode::kLazy,
              "capturing a step needs lazy mode; TORCH_NEURON_MODE=eager runs every op at once");
  Clear();
  std::vector<LazyTensorPtr> lazy = LazyOn(device, state);
  GraphExecutor::Get().BeginCapture(device);  // runs what is pending: every tensor holds data
  device_ = device;
  absl::flat_hash_map<const runtime::DeviceData*, const LazyTensor*> owner;
  for (size_t i = 0; i < state.size(); ++i) {
    if (lazy[i] == nullptr || lazy[i]->data() == nullptr) continue;
    runtime::DeviceDataPtr data = lazy[i]->data();
    auto [it, first] = owner.try_emplace(data.get(), lazy[i].get());
    if (!first && it->second != lazy[i].get()) {
      // Two values that were equal when they last ran share one buffer (a
      // momentum buffer cloned from a gradient). The step may read it for
      // either, and their values part after it: each gets a buffer of its own,
      // so each is a parameter of its own that replays read from its tensor.
      runtime::ThrowIfError(data->Wait());
      auto copy = std::make_shared<runtime::DeviceData>(device, data->dtype(), data->sizes());
      copy->Fulfill(data->DeviceView());
      runtime::ThrowIfError(copy->Wait());
      lazy[i]->SetData(copy);
      data = std::move(copy);
      owner.emplace(data.get(), lazy[i].get());
    }
    holders_[data.get()].push_back(Holder{data, state[i]});
  }
}

void StepGraph::Abort() {
  if (!capturing()) return;
  GraphExecutor::Get().EndCapture(device_);
  Clear();
}

void StepGraph::End(const std::vector<at::Tensor>& state) {
  TORCH_CHECK(capturing(), "no step is being captured");
  std::vector<LazyTensorPtr> lazy = LazyOn(device_, state);
  absl::flat_hash_map<const LazyTensor*, size_t> state_of;
  for (size_t i = 0; i < state.size(); ++i) {
    if (lazy[i] != nullptr) state_of.try_emplace(lazy[i].get(), i);
  }
  StepRecord record;
  GraphExecutor& executor = GraphExecutor::Get();
  try {
    executor.CaptureStep(device_, &record);
  } catch (...) {
    executor.EndCapture(device_);
    Clear();
    throw;
  }
  executor.EndCapture(device_);
  TORCH_CHECK(record.program != nullptr, "captured an empty step: nothing ran on neuron:", device_);

  for (size_t i = 0; i < record.roots.size(); ++i) {
    const int output = record.root_to_output[i];
    auto it = state_of.find(record.roots[i].get());
    if (it != state_of.end()) {
      output_links_.push_back({output, Keep(state[it->second])});
    } else {
      other_outputs_.emplace_back(output, record.roots[i]);
    }
  }
  // A buffer several tensors held (aliases of one value) feeds the step from
  // the one the step writes, if any: that is the one whose value moves on.
  auto written = [&](const at::Tensor& t) {
    return std::any_of(output_links_.begin(), output_links_.end(),
                       [&](const OutputLink& link) { return tensors_[link.tensor].is_same(t); });
  };
  for (size_t i = 0; i < record.inputs.size(); ++i) {
    const auto& [slot, data] = record.inputs[i];
    auto it = holders_.find(data.get());
    if (it == holders_.end() || it->second.front().data.lock() != data) {
      frozen_inputs_.emplace_back(slot, data);
      continue;
    }
    const std::vector<Holder>& holders = it->second;
    auto holder =
        std::find_if(holders.begin(), holders.end(), [&](const Holder& h) { return written(h.tensor); });
    if (holder == holders.end()) holder = holders.begin();
    input_links_.push_back({slot, Keep(holder->tensor), record.input_shapes[i]});
  }
  holders_.clear();
  record.inputs.clear();
  record.input_shapes.clear();
  record.roots.clear();
  record.root_to_output.clear();
  record_ = std::move(record);
}

void StepGraph::Replay(const TraceConfig& trace, const RunConfig& run) {
  TORCH_CHECK(!capturing(), "replay() during the capture of a step");
  TORCH_CHECK(captured(),
              "replay(): nothing captured; capture a step first "
              "(with torch_neuron.graph(g): ...)");
  GraphExecutor& executor = GraphExecutor::Get();
  std::vector<LazyTensorPtr> lazy = LazyOn(device_, tensors_);
  // What was traced since the last step runs first, as at mark_step.
  if (!PendingTensors(device_).empty() || HasPendingDraws(device_)) {
    executor.MarkStep(device_);
  } else {
    runtime::ThrowIfError(runtime::ExecutionQueue::ForDevice(device_).TakeError());
  }

  std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs;
  inputs.reserve(input_links_.size() + frozen_inputs_.size());
  for (const InputLink& link : input_links_) {
    const LazyTensorPtr& t = lazy[link.tensor];
    TORCH_CHECK(t != nullptr, "replay(): a tensor the captured step reads moved off neuron:", device_);
    TORCH_CHECK_VALUE(t->shape() == link.shape, "replay(): a tensor the captured step reads was ",
                      link.shape.ToString(), " at the capture and is ", t->shape().ToString(),
                      " now; capture the step again (reset(), then a new capture)");
    inputs.emplace_back(link.slot, t->data());
  }
  inputs.insert(inputs.end(), frozen_inputs_.begin(), frozen_inputs_.end());

  std::vector<runtime::DeviceDataPtr> outputs;
  outputs.reserve(record_.output_shapes.size());
  for (const ir::Shape& shape : record_.output_shapes) {
    outputs.push_back(std::make_shared<runtime::DeviceData>(device_, shape.dtype(), shape.sizes()));
  }
  for (const OutputLink& link : output_links_) {
    if (lazy[link.tensor] != nullptr) lazy[link.tensor]->SetData(outputs[link.output]);
  }
  for (const auto& [output, weak] : other_outputs_) {
    if (LazyTensorPtr t = weak.lock()) t->SetData(outputs[output]);
  }
  // Only the job may hold a buffer it is to donate (a parameter's old value).
  lazy.clear();
  Replays()->Add(1);
  std::optional<std::string> source;  // the captured program's lines, if recorded
  if (!trace.ir_debug) source = "";
  executor.Launch(device_, run, record_.program, record_.params, std::move(inputs), std::move(outputs),
                  std::move(source), /*launched_at=*/CurrentSourceLocation());
}

}  // namespace torch_neuron::lazy

#include "dynamo/compiled_graph.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/GradMode.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/config.h"
#include "base/metrics.h"
#include "lazy/bridge.h"
#include "lazy/execution_mode.h"
#include "lazy/tracer.h"

namespace torch_neuron::dynamo {
namespace {

metrics::Counter* Traces() {
  static metrics::Counter* counter = metrics::GetCounter("dynamo.region.trace.count");
  return counter;
}

metrics::Counter* Runs() {
  static metrics::Counter* counter = metrics::GetCounter("dynamo.region.run.count");
  return counter;
}

}  // namespace

CompiledGraph::~CompiledGraph() {
  if (tracing_) {
    lazy::GraphExecutor::Get().EndRegionTrace(device_);
    lazy::SetSizeGenericTrace(previous_size_generic_);
    if (origins_ != nullptr) lazy::SetSizeOrigins(previous_origins_);
  }
}

void CompiledGraph::Clear() {
  device_ = -1;
  tracing_ = false;
  traced_ = false;
  size_generic_ = false;
  before_.clear();
  traced_inputs_.clear();
  originals_.clear();
  record_ = lazy::StepRecord();
  inputs_.clear();
  input_links_.clear();
  frozen_inputs_.clear();
  results_.clear();
  mutations_.clear();
  origins_.reset();
  param_origins_.clear();
  origins_blocker_.clear();
}

int CompiledGraph::TraceableDevice(const std::vector<at::Tensor>& inputs) {
  if (lazy::CurrentMode() != ExecutionMode::kLazy || inputs.empty()) return -1;
  int device = -1;
  for (const at::Tensor& t : inputs) {
    lazy::LazyTensorPtr lazy = t.defined() ? lazy::TryGetLazy(t) : nullptr;
    if (lazy == nullptr || (device >= 0 && lazy->device() != device)) return -1;
    device = lazy->device();
  }
  return device;
}

lazy::LazyTensorPtr CompiledGraph::LazyOf(const at::Tensor& t) const {
  lazy::LazyTensorPtr lazy = t.defined() ? lazy::TryGetLazy(t) : nullptr;
  return lazy != nullptr && lazy->device() == device_ ? lazy : nullptr;
}

std::vector<lazy::LazyTensorPtr> CompiledGraph::LazyInputs(const std::vector<at::Tensor>& inputs) const {
  std::vector<lazy::LazyTensorPtr> out;
  out.reserve(inputs.size());
  for (const at::Tensor& t : inputs) out.push_back(LazyOf(t));
  return out;
}

std::vector<int> CompiledGraph::AliasPattern(const std::vector<lazy::LazyTensorPtr>& lazy) {
  std::vector<int> pattern(lazy.size(), -1);
  absl::flat_hash_map<const runtime::DeviceData*, int> first;
  first.reserve(lazy.size());
  for (size_t i = 0; i < lazy.size(); ++i) {
    auto [it, fresh] = first.try_emplace(lazy[i]->data().get(), static_cast<int>(i));
    if (!fresh) pattern[i] = it->second;
  }
  return pattern;
}

std::vector<at::Tensor> CompiledGraph::BeginTrace(int device, const std::vector<at::Tensor>& inputs,
                                                  bool size_generic) {
  TORCH_CHECK(!tracing_ && !traced_, "this compiled graph was traced already");
  Clear();
  device_ = device;
  std::vector<lazy::LazyTensorPtr> lazy = LazyInputs(inputs);
  for (const lazy::LazyTensorPtr& t : lazy) {
    TORCH_CHECK(t != nullptr, "a torch.compile region traced on neuron:", device,
                " takes a tensor that is not on that device");
  }
  lazy::GraphExecutor& executor = lazy::GraphExecutor::Get();
  executor.SyncRegionInputs(device, lazy);  // each input now holds a buffer
  const std::vector<int> aliases = AliasPattern(lazy);
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs_.push_back(InputSpec{lazy[i]->shape(), lazy::TensorLayout::Of(inputs[i]), aliases[i]});
  }
  executor.BeginRegionTrace(device);
  tracing_ = true;
  size_generic_ = size_generic;
  previous_size_generic_ = lazy::SetSizeGenericTrace(size_generic);
  if (size_generic) {
    origins_ = std::make_unique<lazy::SizeOrigins>();
    previous_origins_ = lazy::SetSizeOrigins(origins_.get());
  }
  // A functional view (a slice of a parameter, an expert's weights) is traced
  // through a stand-in over its own buffer: the view itself, read in the
  // trace, may be regenerated from its base (functionalization replays its
  // view ops on the base's value), which would read the base's buffer, not
  // the input's, and keep it in the program as a constant: later calls would
  // read the base as it was at the trace (issue 47). What the graph writes
  // into a stand-in goes back into the view at EndTrace, as Run writes it.
  std::vector<at::Tensor> traced = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!at::functionalization::impl::isFunctionalTensor(inputs[i])) continue;
    if (at::functionalization::impl::unsafeGetFunctionalWrapper(inputs[i])->view_metas().empty()) continue;
    lazy[i] = lazy::LazyTensor::FromData(lazy[i]->data());  // the value EndTrace compares against
    traced[i] = lazy::MakeTensor(lazy[i], inputs_[i].layout);
  }
  before_ = std::move(lazy);
  originals_ = inputs;
  traced_inputs_ = traced;
  return traced;
}

void CompiledGraph::AbortTrace() {
  if (!tracing_) return;
  lazy::GraphExecutor::Get().EndRegionTrace(device_);
  lazy::SetSizeGenericTrace(previous_size_generic_);
  if (origins_ != nullptr) lazy::SetSizeOrigins(previous_origins_);
  // The trace's draws: the inputs' sync ran every earlier one.
  lazy::TakePendingDraws(device_);
  Clear();
}

std::vector<at::Tensor> CompiledGraph::EndTrace(const std::vector<at::Tensor>& outputs) {
  TORCH_CHECK(tracing_, "this compiled graph is not being traced");
  lazy::GraphExecutor& executor = lazy::GraphExecutor::Get();
  executor.EndRegionTrace(device_);
  lazy::SetSizeGenericTrace(previous_size_generic_);
  if (origins_ != nullptr) lazy::SetSizeOrigins(previous_origins_);
  tracing_ = false;
  try {
    absl::flat_hash_map<const runtime::DeviceData*, size_t> input_of;
    for (size_t i = before_.size(); i-- > 0;) input_of[before_[i]->data().get()] = i;

    // What each result (and each input the graph wrote) is: a pending value
    // (a root of the graph), an input's buffer, or a buffer of the trace's own
    // (a constant).
    std::vector<lazy::LazyTensorPtr> roots;
    absl::flat_hash_map<const lazy::LazyTensor*, size_t> root_of;
    std::vector<size_t> root_index;  // per kOutput source, in order of sources
    auto source_of = [&](const at::Tensor& value, const lazy::LazyTensorPtr& t) {
      TORCH_CHECK(t != nullptr, "a torch.compile region traced on neuron:", device_, " returned a tensor on ",
                  value.device(),
                  "; the backend \"neuron\" compiles regions whose results stay on the device");
      Source source;
      source.layout = lazy::TensorLayout::Of(value);
      if (t->is_pending()) {
        auto [it, fresh] = root_of.try_emplace(t.get(), roots.size());
        if (fresh) roots.push_back(t);
        source.kind = Source::Kind::kOutput;
        source.index = it->second;  // a root for now; the program output below
      } else if (auto it = input_of.find(t->data().get()); it != input_of.end()) {
        source.kind = Source::Kind::kInput;
        source.index = it->second;
      } else {
        source.kind = Source::Kind::kFrozen;
        source.frozen = t->data();
      }
      return source;
    };
    for (const at::Tensor& out : outputs) results_.push_back(source_of(out, LazyOf(out)));
    std::vector<lazy::LazyTensorPtr> after = LazyInputs(traced_inputs_);
    for (size_t i = 0; i < after.size(); ++i) {
      if (after[i] != before_[i]) mutations_.emplace_back(i, source_of(traced_inputs_[i], after[i]));
    }

    if (!roots.empty() || lazy::HasPendingDraws(device_)) {
      executor.CompileRegion(device_, roots, &record_, size_generic_);
    }
    auto resolve = [&](Source& source) {
      if (source.kind == Source::Kind::kOutput) source.index = record_.root_to_output[source.index];
    };
    for (Source& source : results_) resolve(source);
    for (auto& [input, source] : mutations_) resolve(source);
    for (size_t i = 0; i < record_.inputs.size(); ++i) {
      const auto& [slot, data] = record_.inputs[i];
      auto it = input_of.find(data.get());
      if (it != input_of.end()) {
        input_links_.emplace_back(slot, it->second);
      } else {
        frozen_inputs_.emplace_back(slot, data);
      }
    }
    if (size_generic_) FindParamOrigins();
    origins_.reset();
  } catch (...) {
    lazy::TakePendingDraws(device_);
    Clear();
    throw;
  }
  // The results as Run gives them: over the buffers the sync gave the roots.
  std::vector<runtime::DeviceDataPtr> buffers(record_.output_shapes.size());
  for (size_t r = 0; r < record_.roots.size(); ++r) {
    buffers[record_.root_to_output[r]] = record_.roots[r]->data();
  }
  std::vector<at::Tensor> results;
  results.reserve(results_.size());
  for (const Source& source : results_) results.push_back(Make(source, buffers, before_));
  for (const auto& [input, source] : mutations_) {
    if (!traced_inputs_[input].is_same(originals_[input])) {
      WriteInput(originals_[input], Make(source, buffers, before_));
    }
  }
  record_.inputs.clear();
  record_.input_shapes.clear();
  record_.parameter_nodes.clear();
  record_.roots.clear();
  record_.root_to_output.clear();
  before_.clear();
  traced_inputs_.clear();
  originals_.clear();
  traced_ = true;
  Traces()->Add(1);
  return results;
}

at::Tensor CompiledGraph::Make(const Source& source, const std::vector<runtime::DeviceDataPtr>& outputs,
                               const std::vector<lazy::LazyTensorPtr>& inputs,
                               const lazy::TensorLayout* layout) const {
  const lazy::TensorLayout& reported = layout != nullptr ? *layout : source.layout;
  switch (source.kind) {
    case Source::Kind::kOutput:
      return lazy::MakeTensor(lazy::LazyTensor::FromData(outputs[source.index]), reported);
    case Source::Kind::kInput:
      return lazy::MakeTensor(lazy::LazyTensor::FromData(inputs[source.index]->data()), reported);
    case Source::Kind::kFrozen:
      break;
  }
  return lazy::MakeTensor(lazy::LazyTensor::FromData(source.frozen), reported);
}

void CompiledGraph::WriteInput(const at::Tensor& input, const at::Tensor& value) {
  if (!at::functionalization::impl::isFunctionalTensor(input) ||
      !at::functionalization::impl::isFunctionalTensor(value)) {
    c10::AutoGradMode no_grad(false);
    input.copy_(value);
    return;
  }
  // What functionalization does for an in-place op, without the op: the
  // wrapper takes the new value (same shape, dtype and layout: the trace's),
  // views of its base see it at their next use, and autograd's version
  // counter moves (an inference tensor's only inside inference_mode, where it
  // has none to move, as on the CPU).
  at::functionalization::impl::replace_(input, at::functionalization::impl::from_functional_tensor(value));
  at::functionalization::impl::commit_update(input);
  at::functionalization::impl::sync(input);
  if (!input.is_inference()) input.unsafeGetTensorImpl()->bump_version();
}

std::optional<std::vector<at::Tensor>> CompiledGraph::Run(const std::vector<at::Tensor>& inputs,
                                                          const TraceConfig& trace, const RunConfig& run) {
  TORCH_CHECK(traced_, "this compiled graph has not been traced");
  if (inputs.size() != inputs_.size()) return std::nullopt;
  std::vector<lazy::LazyTensorPtr> lazy = LazyInputs(inputs);
  for (size_t i = 0; i < lazy.size(); ++i) {
    if (lazy[i] == nullptr || !(lazy[i]->shape() == inputs_[i].shape) ||
        !(lazy::TensorLayout::Of(inputs[i]) == inputs_[i].layout)) {
      return std::nullopt;
    }
  }
  return Launch(inputs, std::move(lazy), record_.params, record_.output_shapes, nullptr, trace, run);
}

std::optional<std::vector<at::Tensor>> CompiledGraph::Launch(
    const std::vector<at::Tensor>& inputs, std::vector<lazy::LazyTensorPtr> lazy,
    std::vector<c10::IValue> params, const std::vector<ir::Shape>& output_shapes,
    const std::vector<lazy::TensorLayout>* result_layouts, const TraceConfig& trace, const RunConfig& run) {
  // A value written into an input of other sizes than traced: plain
  // contiguous, as the input then is (RunAt).
  for (const auto& [input, source] : mutations_) {
    if (!(lazy[input]->shape() == inputs_[input].shape) &&
        !(source.layout.is_default() && lazy::TensorLayout::Of(inputs[input]).is_default())) {
      return std::nullopt;
    }
  }
  lazy::GraphExecutor& executor = lazy::GraphExecutor::Get();
  executor.SyncRegionInputs(device_, lazy);
  const std::vector<int> aliases = AliasPattern(lazy);
  for (size_t i = 0; i < aliases.size(); ++i) {
    if (aliases[i] != inputs_[i].alias_of) return std::nullopt;
  }

  std::vector<std::pair<size_t, runtime::DeviceDataPtr>> bound;
  bound.reserve(input_links_.size() + frozen_inputs_.size());
  for (const auto& [slot, input] : input_links_) bound.emplace_back(slot, lazy[input]->data());
  bound.insert(bound.end(), frozen_inputs_.begin(), frozen_inputs_.end());
  std::vector<runtime::DeviceDataPtr> outputs;
  outputs.reserve(output_shapes.size());
  for (const ir::Shape& shape : output_shapes) {
    outputs.push_back(std::make_shared<runtime::DeviceData>(device_, shape.dtype(), shape.sizes()));
  }
  std::vector<at::Tensor> results;
  results.reserve(results_.size());
  for (size_t i = 0; i < results_.size(); ++i) {
    results.push_back(Make(results_[i], outputs, lazy, result_layouts ? &(*result_layouts)[i] : nullptr));
  }
  for (const auto& [input, source] : mutations_) WriteInput(inputs[input], Make(source, outputs, lazy));
  // Only the job may hold a buffer it is to donate (an input's old value).
  lazy.clear();
  Runs()->Add(1);
  if (record_.program != nullptr) {
    std::optional<std::string> source;  // the program's own lines, if recorded
    if (!trace.ir_debug) source = "";
    executor.Launch(device_, run, record_.program, std::move(params), std::move(bound), std::move(outputs),
                    std::move(source), /*launched_at=*/lazy::CurrentSourceLocation());
  }
  return results;
}

void CompiledGraph::ArmOrigins(std::string op, std::vector<std::vector<int64_t>> args) {
  TORCH_CHECK(tracing_ && origins_ != nullptr, "origins are armed while a size-generic graph is traced");
  origins_->Arm(std::move(op), std::move(args));
}

void CompiledGraph::FindParamOrigins() {
  using lazy::SizeOrigins;
  param_origins_.clear();
  auto blocked = [this](std::string why) { origins_blocker_ = std::move(why); };
  if (origins_ == nullptr) return blocked("not traced size-generic");
  if (origins_->baked()) return blocked("a size-dependent value is a constant of the graph");
  // Sizes the caller cannot give: layouts other than plain contiguous, and
  // buffers of the trace that have a size. (An input of other sizes must be
  // contiguous at both; RunAt checks.)
  auto frozen = [](const Source& source) {
    return source.kind == Source::Kind::kFrozen && !source.frozen->sizes().empty();
  };
  for (size_t i = 0; i < results_.size(); ++i) {
    if (frozen(results_[i])) return blocked(absl::StrCat("result ", i, " is a buffer of the trace"));
  }
  for (const auto& [input, source] : mutations_) {
    if (frozen(source))
      return blocked(absl::StrCat("the value written into input ", input, " is a buffer of the trace"));
  }
  for (const auto& [slot, data] : frozen_inputs_) {
    if (!data->sizes().empty()) return blocked("the program reads a buffer of the trace");
  }
  std::vector<int64_t> origins(record_.params.size(), SizeOrigins::kLiteral);
  std::vector<bool> buffer(record_.params.size(), false);
  for (const auto& [slot, data] : record_.inputs) buffer[slot] = true;
  for (size_t slot = 0; slot < record_.params.size(); ++slot) {
    if (buffer[slot] || !record_.params[slot].isScalar()) continue;
    const int64_t origin = origins_->Get(record_.parameter_nodes[slot]);
    if (origin == SizeOrigins::kUnknown) {
      return blocked(absl::StrCat("parameter ", slot, " (",
                                  c10::IValue(record_.params[slot]).toScalar().toLong(),
                                  ") comes from an op traced inside another's kernel"));
    }
    origins[slot] = origin;
  }
  const int64_t sizes = std::count_if(origins.begin(), origins.end(), [](int64_t o) { return o >= 0; });
  if (sizes < origins_->sizes_noted())
    return blocked("a size argument is held by no parameter of the program");
  origins_blocker_.clear();
  param_origins_ = std::move(origins);
}

int64_t CompiledGraph::param_value(size_t slot) const {
  TORCH_CHECK(slot < record_.params.size(), "no parameter slot ", slot);
  const c10::IValue& v = record_.params[slot];
  return v.isInt() ? v.toInt() : 0;
}

std::vector<std::vector<int64_t>> CompiledGraph::output_sizes() const {
  std::vector<std::vector<int64_t>> out;
  for (const ir::Shape& shape : record_.output_shapes) out.push_back(shape.sizes());
  return out;
}

std::vector<std::pair<std::vector<int64_t>, int64_t>> CompiledGraph::result_layouts() const {
  std::vector<std::pair<std::vector<int64_t>, int64_t>> out;
  for (const Source& s : results_) {
    out.emplace_back(std::vector<int64_t>(s.layout.strides.begin(), s.layout.strides.end()),
                     s.layout.storage_offset);
  }
  return out;
}

std::vector<std::pair<int, int64_t>> CompiledGraph::result_sources() const {
  std::vector<std::pair<int, int64_t>> out;
  for (const Source& s : results_) out.emplace_back(static_cast<int>(s.kind), static_cast<int64_t>(s.index));
  return out;
}

std::vector<std::tuple<int64_t, int, int64_t>> CompiledGraph::mutation_sources() const {
  std::vector<std::tuple<int64_t, int, int64_t>> out;
  for (const auto& [input, s] : mutations_) {
    out.emplace_back(static_cast<int64_t>(input), static_cast<int>(s.kind), static_cast<int64_t>(s.index));
  }
  return out;
}

std::optional<std::vector<at::Tensor>> CompiledGraph::RunAt(
    const std::vector<at::Tensor>& inputs, const std::vector<std::pair<size_t, int64_t>>& params,
    const std::vector<std::vector<int64_t>>& output_sizes, const std::vector<ResultLayout>& result_layouts,
    const TraceConfig& trace, const RunConfig& run) {
  TORCH_CHECK(traced_ && !param_origins_.empty(), "this compiled graph cannot run at other sizes");
  TORCH_CHECK(result_layouts.size() == results_.size(), "expected the layouts of ", results_.size(),
              " results, got ", result_layouts.size());
  TORCH_CHECK(output_sizes.size() == record_.output_shapes.size(), "expected the sizes of ",
              record_.output_shapes.size(), " program outputs, got ", output_sizes.size());
  if (inputs.size() != inputs_.size()) return std::nullopt;
  std::vector<lazy::LazyTensorPtr> lazy = LazyInputs(inputs);
  for (size_t i = 0; i < lazy.size(); ++i) {
    if (lazy[i] == nullptr || lazy[i]->shape().dtype() != inputs_[i].shape.dtype() ||
        lazy[i]->shape().sizes().size() != inputs_[i].shape.sizes().size()) {
      return std::nullopt;
    }
    // An input of the traced sizes keeps its traced layout (an expert's
    // weights, a view into the stacked ones); the caller checked the layout
    // of one of other sizes against its expressions.
    if (lazy[i]->shape() == inputs_[i].shape && !(lazy::TensorLayout::Of(inputs[i]) == inputs_[i].layout)) {
      return std::nullopt;
    }
  }
  std::vector<c10::IValue> values = record_.params;
  for (const auto& [slot, value] : params) {
    TORCH_CHECK(slot < param_origins_.size() && param_origins_[slot] >= 0, "parameter slot ", slot,
                " is not a size of the graph");
    values[slot] = values[slot].isDouble() ? c10::IValue(static_cast<double>(value)) : c10::IValue(value);
  }
  std::vector<ir::Shape> shapes;
  shapes.reserve(output_sizes.size());
  for (size_t r = 0; r < output_sizes.size(); ++r)
    shapes.emplace_back(record_.output_shapes[r].dtype(), output_sizes[r]);
  std::vector<lazy::TensorLayout> layouts;
  layouts.reserve(result_layouts.size());
  for (const auto& [sizes, strides, offset] : result_layouts) {
    layouts.push_back(lazy::TensorLayout::From(sizes, strides, offset));
  }
  return Launch(inputs, std::move(lazy), std::move(values), shapes, &layouts, trace, run);
}

}  // namespace torch_neuron::dynamo

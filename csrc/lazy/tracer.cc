#include "lazy/tracer.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/DefaultDtype.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "absl/base/optimization.h"
#include "absl/container/inlined_vector.h"
#include "base/config.h"
#include "base/metrics.h"
#include "ir/interner.h"
#include "ir/node.h"
#include "lazy/argument_binder.h"
#include "lazy/bridge.h"
#include "lazy/concat_pieces.h"
#include "lazy/cpu_fallback.h"
#include "lazy/execution_mode.h"
#include "lazy/graph_executor.h"
#include "lazy/hidden_mutations.h"
#include "lazy/layouts.h"
#include "lazy/map_tensors.h"
#include "lazy/meta_inference.h"
#include "lazy/neuron_meta.h"
#include "lazy/op_signature.h"
#include "lazy/ran_values.h"
#include "lazy/scheduler.h"
#include "lazy/size_origins.h"
#include "lazy/tensor_impl.h"
#include "lazy/trace_info.h"
#include "lazy/trace_observer.h"
#include "runtime/device_registry.h"
#include "runtime/device_assert.h"
#include "runtime/device_data.h"
#include "base/dtypes.h"
#include "runtime/dtype_checks.h"
#include "runtime/execution_queue.h"
#include "runtime/generator.h"
#include "base/profiler.h"
#include "runtime/fork_guard.h"
#include "ir/op_schema.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

// tracer.h SetSizeGenericTrace.
thread_local bool size_generic_trace = false;

using Clock = std::chrono::steady_clock;

using ir::IsGeneratorType;
using ir::IsListOf;
using ir::IsNumberType;
using ir::IsTensorType;
using ir::Unwrapped;

struct TraceMetrics {
  metrics::Counter* ops = metrics::GetCounter("trace.op.count");
  metrics::Counter* nanos = metrics::GetCounter("trace.ns");
};
const TraceMetrics& TraceCounters() {
  static const TraceMetrics* c = new TraceMetrics();
  return *c;
}

}  // namespace

namespace {

// Whether this is an op of a tensor subclass's __torch_dispatch__ (DTensor's
// local ops) on functional neuron tensors. PyTorch runs those with every key
// above Python excluded (PythonTLSSnapshot among them, which nothing else
// excludes), Functionalize with them, so functionalization never saw the op.
// Functional arguments alone do not tell: below functionalization, the
// _to_copy kernel hands its callers a wrapped result (aten_copy.cc).
bool InsideSubclassOnFunctionalTensors(const torch::jit::Stack& stack, size_t base) {
  const c10::DispatchKeySet excluded = c10::impl::tls_local_dispatch_key_set().excluded_;
  if (!excluded.has(c10::DispatchKey::PythonTLSSnapshot) || !excluded.has(c10::DispatchKey::Functionalize)) {
    return false;
  }
  auto functional = [](const c10::IValue& v) {
    return v.isTensor() && IsNeuron(v.toTensor()) &&
           at::functionalization::impl::isFunctionalTensor(v.toTensor());
  };
  for (size_t i = base; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (functional(v)) return true;
    if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (functional(e)) return true;
      }
    }
  }
  return false;
}

// Such an op goes through functionalization after all: traced here, it would
// read its wrappers' values and return plain lazy tensors, outside
// functionalization's view bookkeeping (a subclass's views would be copies,
// its tensors storage-less).
void TraceThroughFunctionalization(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
  c10::impl::ForceDispatchKeyGuard guard(local.included_,
                                         local.excluded_.remove(c10::DispatchKey::Functionalize));
  op.callBoxed(stack);
}

void TraceUnobserved(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A tensor assert (aten::_assert_async) on a device whose graph must stay one
// program (a torch.compile region or a captured step being traced): it cannot
// read its operand now, so it becomes the program's own check,
// neuron::assert_async (runtime/device_assert.h), which runs when the graph
// does and fails the run with the assert's message. Elsewhere the CPU fallback
// reads the value and raises at once. True when traced.
bool TraceDeviceAssert(const TracedCall& c) {
  const at::Tensor& condition = c.arg(0).toTensor();
  if (!IsNeuron(condition) || !GraphExecutor::Get().IsCapturing(condition.device().index())) return false;
  // What the CPU checks of the metadata, it checks at once.
  TORCH_CHECK(condition.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
  static const c10::OperatorHandle device_assert =
      c10::Dispatcher::singleton().findSchemaOrThrow(std::string(runtime::kDeviceAssertOp).c_str(), "");
  torch::jit::Stack stack{condition, c.num_args > 1 ? c.arg(1) : c10::IValue()};
  TraceUnobserved(device_assert, &stack);  // a node the device's next sync runs (a pending draw)
  torch::jit::drop(*c.stack, c.num_args);
  return true;
}

// After the CPU fallback ran an op whose output shape depends on the data:
// its neuron results' sizes came from data (LazyTensor::size_from_data).
void MarkResultsSizeFromData(const TracedCall& c) {
  auto mark = [](const at::Tensor& t) {
    if (LazyTensorPtr lazy = t.defined() ? TryGetLazy(t) : nullptr) lazy->MarkSizeFromData();
  };
  for (size_t i = c.base; i < c.stack->size(); ++i) ForEachTensor((*c.stack)[i], mark);
}

// Whether aten::index.Tensor's call indexes by a boolean (or uint8) mask.
bool IndexesByMask(const TracedCall& c) {
  const c10::IValue& indices = c.arg(1);
  if (!indices.isList()) return false;
  for (const c10::IValue& e : indices.toListRef()) {
    if (!e.isTensor() || !e.toTensor().defined()) continue;
    const c10::ScalarType dtype = e.toTensor().scalar_type();
    if (dtype == c10::ScalarType::Bool || dtype == c10::ScalarType::Byte) return true;
  }
  return false;
}

// Stage 1, shortcuts: ops handled without a node of their own. True when the
// op is done.
bool TakeShortcut(const TracedCall& c) {
  if (ABSL_PREDICT_FALSE(c.info.tensor_assert) && TraceDeviceAssert(c)) return true;
  if (c.info.never_traced != nullptr) {
    CpuFallback(c.op, c.stack, c.info.never_traced, c.trace);
    if (c.info.data_dependent) MarkResultsSizeFromData(c);
    return true;
  }
  // Ops that return their input's value unchanged share its LazyTensor: below
  // functionalization values are not mutated, so detach/clone/alias cost
  // nothing, add no node (a model's parameters, detached when wrapped in
  // nn.Parameter, stay device data), and materializing either materializes both
  // (printing a detached copy does not leave the original to run again).
  if (c.info.identity) {
    const at::Tensor& input = c.arg(0).toTensor();
    if (LazyTensorPtr lazy = TryGetLazy(input)) {
      // An alias keeps the input's strides and offset; a clone is laid out as
      // its memory format says (empty_like's rules).
      const bool clone = c.info.name == "aten::clone";
      const TensorLayout layout = clone ? CloneLayout(input, c.arg(1)) : TensorLayout::Of(input);
      // An alias or detach is a view of its input (bridge.h, MakeViewTensor);
      // a clone or lift_fresh_copy is a new tensor.
      const bool fresh = clone || c.info.name == "aten::lift_fresh_copy";
      at::Tensor result = fresh ? MakeTensor(lazy, layout) : MakeViewTensor(lazy, layout);
      torch::jit::drop(*c.stack, c.num_args);
      c.stack->push_back(std::move(result));
      return true;
    }
  }
  if (ABSL_PREDICT_FALSE(c.info.hidden_mutation) && TraceHiddenMutation(c.op, c.stack)) return true;
  if (ABSL_PREDICT_FALSE(c.info.inplace_view) && RestrideMetadataOnlyTensor(c.op, c.stack, c.base)) {
    return true;
  }
  if (c.info.addresses_storage) {
    const at::Tensor input = c.arg(0).toTensor();
    if (IsNeuron(input) && !TensorLayout::Of(input).is_default()) {
      TraceAddressingStorage(c.op, c.stack);
      return true;
    }
  }
  return false;
}

// Stage 2, the device: that of the neuron tensors (all the same) or of the
// device argument. Nullopt when the op was handled another way (fake tensors
// of a neuron device, or no neuron argument at all).
std::optional<int> DeviceOf(const TracedCall& c) {
  int device = -1;
  auto claim = [&](int d) {
    runtime::ThrowIfError(runtime::DeviceRegistry::Global().CheckIndex(d));
    TORCH_CHECK(device < 0 || device == d,
                "Expected all tensors to be on the same device, but "
                "found at least two devices, neuron:",
                device, " and neuron:", d, "! (in ", c.info.name, ")");
    device = d;
  };
  const torch::jit::Stack& stack = *c.stack;
  for (size_t i = c.base; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && IsNeuron(v.toTensor())) {
      claim(v.toTensor().device().index());
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor() && IsNeuron(e.toTensor())) claim(e.toTensor().device().index());
      }
    }
  }
  for (size_t i = c.base; i < stack.size() && device < 0; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      device = v.toDevice().has_index() ? v.toDevice().index()
                                        : runtime::DeviceRegistry::Global().current_device();
      runtime::ThrowIfError(runtime::DeviceRegistry::Global().CheckIndex(device));
    }
  }
  if (device >= 0) return device;
  // Meta tensors that dispatch as neuron ones: the fake tensors of a neuron
  // device (torch.distributed.tensor's sharding propagation, torch.compile)
  // wrap meta data. Their ops compute shapes only, on the Meta kernels.
  for (size_t i = c.base; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_meta()) {
      RunNeuronMeta(c.op, c.stack);
      return std::nullopt;
    }
  }
  CpuFallback(c.op, c.stack, "it has no neuron tensor or device argument", c.trace);
  return std::nullopt;
}

// Stage 2b, tensors of another device among the arguments, for an op whose
// CPU and CUDA kernel is its composite one: that kernel runs first, as on
// CUDA, so that its own check raises with its own words (block_diag's "input
// tensors must all be on the same device. Input 0 is on device cpu ...").
// Where it accepts the devices, its results are dropped, and stage 3 raises
// the generic "Expected all tensors to be on the same device".
void RunCompositeDeviceChecks(const TracedCall& c) {
  if (ABSL_PREDICT_TRUE(!c.info.composite_explicit)) return;
  bool foreign = false;
  auto look = [&](const c10::IValue& v) {
    if (!v.isTensor()) return;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || IsNeuron(t) || t.is_meta()) return;
    if (t.device().is_cpu() && (t.dim() == 0 || c.info.allows_cpu_tensors)) return;
    foreign = true;
  };
  for (size_t i = c.base; i < c.stack->size(); ++i) {
    const c10::IValue& v = (*c.stack)[i];
    if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) look(e);
    } else {
      look(v);
    }
  }
  if (!foreign) return;
  torch::jit::Stack arguments(c.stack->begin() + c.base, c.stack->end());
  c.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &arguments);
}

// Stage 3b, reads of a concatenation's piece: a slice, select or narrow that
// lies inside one operand of a pending cat reads that operand instead
// (concat_pieces.h), the positions shifted by the operand's offset. The result
// is the same tensor, shape and layout (Meta ran on the call as made).
void FlattenConcat(const TracedCall& c, ArgumentBinder& bound, const MetaResult& meta);

void ReadThroughConcat(const TracedCall& c, ArgumentBinder& bound, const MetaResult& meta) {
  using RangeRead = TraceInfo::RangeRead;
  if (c.info.range_read == RangeRead::kConcat) return FlattenConcat(c, bound, meta);
  std::vector<ir::Value>& operands = bound.operands();
  // A cat that already ran is read from its buffer, as any value that ran.
  if (ABSL_PREDICT_TRUE(c.info.range_read == RangeRead::kNone) || operands.empty() ||
      operands[0].node->kind() != ir::NodeKind::kOp || RanValues::Global().HasRun(*operands[0].node)) {
    return;
  }
  // The positions, as ints (a SymInt that is not a plain int is left alone).
  auto position = [&](size_t i) -> std::optional<std::optional<int64_t>> {
    const c10::IValue& v = c.arg(i);
    if (v.isNone()) return std::optional<int64_t>();
    if (!v.isInt()) return std::nullopt;
    return std::optional<int64_t>(v.toInt());
  };
  const ir::Shape& input = operands[0].shape();
  std::optional<PositionRange> range;
  if (c.info.range_read == RangeRead::kSlice) {
    const auto start = position(2), end = position(3), step = position(4);
    if (!start || !end || !step || !c.arg(1).isInt() || !*step) return;
    range = SliceRange(input, c.arg(1).toInt(), *start, *end, **step);
  } else {
    const auto at = position(2), length = position(3);
    if (!at || !*at || !c.arg(1).isInt()) return;
    if (c.info.range_read == RangeRead::kSelect) {
      range = SelectRange(input, c.arg(1).toInt(), **at);
    } else {
      if (!length || !*length) return;
      range = NarrowRange(input, c.arg(1).toInt(), **at, **length);
    }
  }
  if (!range) return;
  const std::optional<ConcatPiece> piece = FindConcatPiece(operands[0], range->dim, range->begin, range->end);
  if (!piece) return;
  // A piece that already ran (a token's column, kept when its graph ran) is
  // read from its buffer: the node would carry every earlier token's history
  // in its hash, and the graph's root order follows those hashes.
  operands[0] = RanValues::Global().Resolve(piece->piece);
  std::vector<ir::Arg>& args = bound.args();
  args[1] = ir::Arg::Attr(range->dim);
  // A position bound as a parameter gets a parameter of the new value.
  auto set_position = [&](size_t i, int64_t value) {
    if (args[i].kind == ir::Arg::Kind::kOperand) {
      operands[args[i].operands[0]] = ir::Value{ir::Node::MakePosition(value), 0};
    } else {
      args[i] = ir::Arg::Attr(value);
    }
  };
  set_position(2, range->begin - piece->offset);
  if (c.info.range_read == RangeRead::kSlice) {
    // A None position was bound as an attribute: it becomes the value.
    set_position(3, range->end - piece->offset);
  }
}

// ...and a cat whose operands are pending cats along its dim takes their
// operands, those that ran as their buffers (concat_pieces.h).
void FlattenConcat(const TracedCall& c, ArgumentBinder& bound, const MetaResult& meta) {
  std::vector<ir::Value>& operands = bound.operands();
  std::vector<ir::Arg>& args = bound.args();
  if (args.size() != 2 || args[0].kind != ir::Arg::Kind::kOperandList || !c.arg(1).isInt() ||
      meta.shapes.size() != 1 || operands.size() != args[0].operands.size()) {
    return;
  }
  const ir::Shape& result = meta.shapes[0];
  const RanValues& ran = RanValues::Global();
  std::vector<ir::Value> flat;
  bool changed = false;
  for (int32_t k : args[0].operands) {
    if (k < 0) return;
    const ir::Value& operand = operands[k];
    std::optional<std::vector<ir::Value>> inner;
    if (operand.node->kind() == ir::NodeKind::kOp && !ran.HasRun(*operand.node)) {
      inner = ConcatOperands(operand, c.arg(1).toInt(), result.dim(), result.dtype());
    }
    if (!inner) {
      flat.push_back(operand);
      continue;
    }
    changed = true;
    for (const ir::Value& v : *inner) flat.push_back(ran.Resolve(v));
  }
  if (!changed) return;
  std::vector<int32_t> indices(flat.size());
  for (size_t i = 0; i < flat.size(); ++i) indices[i] = static_cast<int32_t>(i);
  operands = std::move(flat);
  args[0] = ir::Arg::OperandList(indices);
}

// Stage 5, results that need no node: a constant factory becomes a buffer
// the device queue fills. True when the op is done. Not in a size-generic
// region's trace (a SizeOrigins recorder is installed): a buffer filled now
// has the traced size and would be a constant of the program, which then
// could not run at other sizes; there the factory is a node, its sizes
// parameters, and the program fills it at the size it is launched with.
bool FillFactoryResult(const TracedCall& c, int device, const MetaResult& meta) {
  if (!c.info.fill.is_factory || meta.shapes.size() != 1) return false;
  if (ABSL_PREDICT_FALSE(CurrentSizeOrigins() != nullptr)) return false;
  const ir::Shape& shape = meta.shapes[0];
  const c10::Scalar value = c.info.fill.value_arg >= 0 ? c.arg(c.info.fill.value_arg).toScalar()
                                                       : c10::Scalar(c.info.fill.constant);
  auto data = std::make_shared<runtime::DeviceData>(device, shape.dtype(), shape.sizes());
  runtime::ExecutionQueue::ForDevice(device).Enqueue([data, value]() {
    data->FulfillWithValue(value);
    return data->Wait();
  });
  torch::jit::drop(*c.stack, c.num_args);
  LazyTensorPtr t = LazyTensor::FromData(std::move(data));
  c.stack->push_back(MakeTensor(t, meta.layouts[0]));
  TraceCounters().ops->Add(1);
  return true;
}

// ...and uint16/32/64 and complex32, which reach only the few CPU kernels
// PyTorch has for them: a reason to take the CPU fallback. Views
// (functionalization's *_copy ops) stay traced: they move elements, which
// every kernel does for any dtype, and keep the view's layout.
std::optional<std::string> HostOnlyReason(const TracedCall& c, const MetaResult& meta,
                                          const std::vector<ir::Value>& operands) {
  const DtypeFacts* host_only = nullptr;
  for (const ir::Shape& s : meta.shapes)
    if (IsHostOnlyDtype(s.dtype())) host_only = FactsOf(s.dtype());
  for (const ir::Value& v : operands)
    if (IsHostOnlyDtype(v.shape().dtype())) host_only = FactsOf(v.shape().dtype());
  if (ABSL_PREDICT_TRUE(host_only == nullptr) || c.info.view_of) return std::nullopt;
  return std::string("it reads or writes ") + host_only->python_name +
         ", which runs on PyTorch's CPU kernels";
}

// Stage 6, writes: the tensor arguments, and for each return the argument it
// writes (in-place and out= ops), or -1. A reason to take the CPU fallback when
// the op writes an argument that is not a neuron tensor, or one it does not
// return.
struct Writes {
  std::vector<at::Tensor> originals;  // per argument: the tensor, or undefined
  std::vector<int> written_by_return;
};
std::optional<std::string> CheckWrites(const TracedCall& c, Writes* w) {
  for (size_t i = 0; i < c.num_args; ++i) {
    const c10::IValue& v = c.arg(i);
    w->originals.push_back(v.isTensor() ? v.toTensor() : at::Tensor());
  }
  for (const auto& [i, is_out] : c.info.written_args) {
    if (!w->originals[i].defined() || !IsNeuron(w->originals[i])) continue;
    LazyTensorPtr target = GetLazy(w->originals[i]);
    if (is_out) target->ClearStale();
    target->RecordWriteIntoView(c.info.name);
  }
  const auto& returns = c.schema.returns();
  w->written_by_return.assign(returns.size(), -1);
  for (size_t r = 0; r < returns.size(); ++r) {
    const c10::AliasInfo* alias = returns[r].alias_info();
    if (alias == nullptr || !alias->isWrite()) continue;
    for (size_t i = 0; i < c.num_args; ++i) {
      const c10::AliasInfo* in = c.schema.arguments()[i].alias_info();
      if (in != nullptr && in->isWrite() && in->beforeSets() == alias->beforeSets() &&
          w->originals[i].defined() && IsNeuron(w->originals[i])) {
        w->written_by_return[r] = static_cast<int>(i);
      }
    }
    if (w->written_by_return[r] < 0) return "it writes a non-neuron argument";
  }
  for (size_t i = 0; i < c.num_args; ++i) {
    const c10::AliasInfo* in = c.schema.arguments()[i].alias_info();
    if (in == nullptr || !in->isWrite()) continue;
    bool returned = false;
    for (int r : w->written_by_return) returned |= r == static_cast<int>(i);
    if (!returned) return "it writes an argument it does not return";
  }
  return std::nullopt;
}

// Stage 7, emitting the node (hash-consed: the same op on the same operands
// is the same node).
ir::NodePtr EmitNode(const TracedCall& c, ArgumentBinder& bound, const MetaResult& meta) {
  static ir::NodeInterner* interner = new ir::NodeInterner();
  // Eager mode always records the user's line: its execution errors name it.
  // (An op interned earlier keeps the line it was first traced from.)
  std::string source;
  if (c.trace.ir_debug || CurrentMode() == ExecutionMode::kEager) source = CurrentSourceLocation();
  return interner->Intern(ir::Node::MakeOp(c.info.op_name, std::move(bound.operands()),
                                           std::move(bound.args()), meta.shapes, std::move(source)));
}

// Stage 8, binding the results: the stack's arguments give way to the node's
// outputs (written arguments take them; new tensors hold the others). The
// tensors made or updated.
std::vector<LazyTensorPtr> BindResults(const TracedCall& c, int device, const ir::NodePtr& node,
                                       const MetaResult& meta, const Writes& w) {
  // A view's base: its first tensor argument.
  LazyTensorPtr view_base;
  if (c.info.view && c.num_args > 0 && w.originals[0].defined() && IsNeuron(w.originals[0])) {
    view_base = GetLazy(w.originals[0]);
  }
  // A view, or the *_copy form functionalization runs in its place, is never
  // an inference tensor (bridge.h, MakeViewTensor).
  const bool view_like = c.info.view || c.info.view_of;
  auto make = [&](LazyTensorPtr t, const TensorLayout& layout) {
    return view_like ? MakeViewTensor(std::move(t), layout) : MakeTensor(std::move(t), layout);
  };
  torch::jit::Stack& stack = *c.stack;
  torch::jit::drop(stack, c.num_args);
  std::vector<LazyTensorPtr> created;
  int output = 0;
  for (size_t r = 0; r < c.schema.returns().size(); ++r) {
    const int count = meta.counts[r];
    if (count < 0) {
      ir::Value value{node, output++};
      if (node->shape(value.index).dtype() == c10::ScalarType::Undefined) {
        stack.push_back(at::Tensor());
      } else if (w.written_by_return[r] >= 0) {
        const at::Tensor& target = w.originals[w.written_by_return[r]];
        GetLazy(target)->SetPending(value);
        GetImpl(target)->RefreshSizes(meta.layouts[value.index]);
        created.push_back(GetLazy(target));
        stack.push_back(target);
      } else {
        LazyTensorPtr t = LazyTensor::FromValue(value, device);
        if (c.info.view && view_base != nullptr) t->set_view_base(view_base);
        created.push_back(t);
        stack.push_back(make(t, meta.layouts[value.index]));
      }
    } else {
      std::vector<at::Tensor> list;
      for (int k = 0; k < count; ++k) {
        const int index = output++;
        LazyTensorPtr t = LazyTensor::FromValue(ir::Value{node, index}, device);
        created.push_back(t);
        list.push_back(make(t, meta.layouts[index]));
      }
      stack.push_back(list);
    }
  }
  return created;
}

// Traces one op through the stages above; an op any stage cannot trace takes
// the CPU fallback with that stage's reason.
void TraceUnobserved(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // At the op, not at a later sync: a forked child's device state is unusable.
  if (runtime::InBadFork()) runtime::ThrowIfError(runtime::BadForkError());
  const auto start = Clock::now();
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  // The top of the trace: the one read of the config an op makes; its stages
  // and the eager scheduler get the sub-configs.
  const Config& config = GlobalConfig();
  const TracedCall c{op, stack, schema, InfoFor(op), num_args, stack->size() - num_args, config.trace};
  if (ABSL_PREDICT_FALSE(InsideSubclassOnFunctionalTensors(*stack, c.base))) {
    return TraceThroughFunctionalization(op, stack);
  }
  if (TakeShortcut(c)) return;
  const std::optional<int> device = DeviceOf(c);
  if (!device) return;
  RunCompositeDeviceChecks(c);

  // Indexing by a boolean mask (x[mask]) takes the CPU fallback: its result's
  // sizes are the mask's count (LazyTensor::size_from_data).
  const bool by_mask = ABSL_PREDICT_FALSE(c.info.index_tensor) && IndexesByMask(c);
  auto fallback = [&](const std::string& reason) {
    CpuFallback(op, stack, reason, c.trace);
    if (by_mask) MarkResultsSizeFromData(c);
  };
  ArgumentBinder bound(c, *device, size_generic_trace);
  if (std::optional<std::string> reason = bound.Bind()) return fallback(*reason);

  // Stage 4, Meta inference: output shapes and layouts, cached per op key.
  const ir::hash_t op_key = bound.op_key();
  const std::shared_ptr<const MetaResult> meta =
      InferMeta(op, op_key, c.info.view_of, c.info.meta_fixup, [&bound] { return bound.TakeMetaStack(); });
  if (!meta) return fallback("it has no Meta kernel for these inputs");
  for (const ir::Shape& s : meta->shapes) {
    if (s.dtype() != c10::ScalarType::Undefined) runtime::CheckSupportedDtype(s.dtype());
  }

  if (FillFactoryResult(c, *device, *meta)) return;
  if (std::optional<std::string> reason = HostOnlyReason(c, *meta, bound.operands())) {
    return fallback(*reason);
  }
  Writes writes;
  if (std::optional<std::string> reason = CheckWrites(c, &writes)) return fallback(*reason);

  ReadThroughConcat(c, bound, *meta);
  const ir::NodePtr node = EmitNode(c, bound, *meta);
  const std::vector<LazyTensorPtr> created = BindResults(c, *device, node, *meta, writes);
  if (ABSL_PREDICT_FALSE(bound.size_from_data())) bound.MarkResultsSizeFromData(created);
  // Every draw runs exactly once, in trace order, even if its result is never
  // read: the next sync of the device takes it along (graph_executor.cc).
  // Collectives too: every rank must run each one, in the order it traced them;
  // and device asserts, whose results nobody reads.
  if (bound.draws() || c.info.collective || c.info.device_assert) AddPendingDraw(*device, node);
  TraceCounters().ops->Add(1);
  TraceCounters().nanos->Add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  if (CurrentMode() == ExecutionMode::kEager)
    EagerScheduler(config.run).OnOpTraced(*device, op_key, created, config.run);
}

// With observers installed: the op's arguments are kept (the tracer consumes
// them) and shown to the observers once the op is handled. An op that throws
// (bad input) is not shown.
void TraceObserved(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t num_args = op.schema().arguments().size();
  std::vector<c10::IValue> args(stack->end() - static_cast<std::ptrdiff_t>(num_args), stack->end());
  ObservedOpScope scope;
  TraceUnobserved(op, stack);
  NotifyTraceObservers(TracedOp{op, InfoFor(op).name, args, scope.fallback_reason()});
}

}  // namespace

void TraceOp(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  profiler::Scope scope("trace", op.operator_name().name);
  if (ABSL_PREDICT_FALSE(scope.recording())) scope.set_source(CurrentSourceLocation());
  if (ABSL_PREDICT_FALSE(HasTraceObservers())) return TraceObserved(op, stack);
  TraceUnobserved(op, stack);
}

bool SetSizeGenericTrace(bool on) { return std::exchange(size_generic_trace, on); }

bool SizeGenericTrace() { return size_generic_trace; }

}  // namespace torch_neuron::lazy

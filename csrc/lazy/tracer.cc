#include "lazy/tracer.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/DefaultDtype.h>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "base/config.h"
#include "base/metrics.h"
#include "ir/interner.h"
#include "ir/node.h"
#include "ir/op_traits.h"
#include "lazy/aten_ops.h"
#include "lazy/bridge.h"
#include "lazy/cpu_fallback.h"
#include "lazy/execution_mode.h"
#include "lazy/hidden_mutations.h"
#include "lazy/layouts.h"
#include "lazy/meta_fixups.h"
#include "lazy/meta_inference.h"
#include "lazy/scheduler.h"
#include "lazy/tensor_impl.h"
#include "lazy/trace_observer.h"
#include "runtime/collectives.h"
#include "runtime/device_registry.h"
#include "runtime/device_data.h"
#include "runtime/dtypes.h"
#include "runtime/execution_queue.h"
#include "runtime/generator.h"
#include "runtime/profiler.h"
#include "runtime/fork_guard.h"
#include "runtime/schema_types.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

// The Meta-cache key of a traced call: the op's name hash, then per argument a
// tag and its words, hashed once at the end (one XXH3 call per op, not a
// combine per argument). Tags make the word sequence unambiguous. The key
// lives in this process only.
class SignatureKey {
 public:
  enum Tag : uint64_t {
    kTensor = 1,
    kCpuScalar,
    kScalar,
    kList,
    kGenerator,
    kDtype,
    kDevice,
    kAttr,
    kLayout
  };

  explicit SignatureKey(ir::hash_t name) { Add(name); }
  SignatureKey& Tagged(Tag tag) { return Word(tag); }
  SignatureKey& Word(uint64_t word) {
    words_.push_back(word);
    return *this;
  }
  SignatureKey& Add(ir::hash_t h) { return Word(absl::Uint128High64(h)).Word(absl::Uint128Low64(h)); }
  ir::hash_t Hash() const {
    return ir::HashBytes(words_.data(), words_.size() * sizeof(uint64_t), 0x6d657461);
  }

 private:
  absl::InlinedVector<uint64_t, 32> words_;
};

using Clock = std::chrono::steady_clock;

using runtime::IsGeneratorType;
using runtime::IsListOf;
using runtime::IsNumberType;
using runtime::IsTensorType;
using runtime::Unwrapped;

// Random ops without a Generator argument (rand, randn_like, native_dropout...)
// draw from the CPU's default generator inside their kernels; they must not be
// traced as they are but decomposed into ops that take the device generator.
bool UsesDefaultGeneratorImplicitly(const c10::OperatorHandle& op, const ir::OpTraits& traits) {
  if (!traits.random) return false;
  for (const c10::Argument& arg : op.schema().arguments()) {
    if (IsGeneratorType(arg.type())) return false;
  }
  return true;
}

// Factories of constant tensors (zeros, ones, full and their _like/new_ forms)
// are not graph nodes: each call becomes a buffer of its own that the device
// queue fills, a graph input like any device data. A step that creates a
// buffer (an optimizer's first step initialising its moments with zeros) thus
// traces the same graph as the steps that read the buffer back, and one
// compile serves both. Which argument holds the fill value (-1: none).
struct FillFactory {
  bool is_factory = false;
  double constant = 0;  // the value when there is no argument
  int value_arg = -1;
};

FillFactory FillFactoryFor(const c10::FunctionSchema& schema, const ir::OpTraits& traits) {
  FillFactory f;
  switch (traits.fill) {
    case ir::FillKind::kNone:
      break;
    case ir::FillKind::kZeros:
      f.is_factory = true;
      break;
    case ir::FillKind::kOnes:
      f.is_factory = true, f.constant = 1;
      break;
    case ir::FillKind::kFull:
      if (std::optional<int> index = schema.argumentIndexWithName("fill_value")) {
        f.is_factory = true, f.value_arg = *index;
      }
      break;
  }
  return f;
}

// The view op whose *_copy form `schema` is (aten::slice.Tensor for
// aten::slice_copy.Tensor), if any.
std::optional<c10::OperatorHandle> ViewOpOf(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  if (!absl::EndsWith(name, "_copy") || ir::TraitsOf(name).identity || name == "aten::_to_copy") {
    return std::nullopt;
  }
  std::optional<c10::OperatorHandle> view = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(name.substr(0, name.size() - 5), schema.overload_name()));
  if (!view || !view->hasSchema()) return std::nullopt;
  for (const c10::Argument& ret : view->schema().returns()) {
    if (ret.alias_info() == nullptr || ret.alias_info()->isWrite()) return std::nullopt;
  }
  if (view->schema().arguments().size() != schema.arguments().size()) return std::nullopt;
  return view;
}

// What the tracer needs to know of an operator, worked out once per operator
// and thread (tracing is the hot path: no string building or matching per op).
struct TraceInfo {
  std::string name;  // "aten::add.Tensor"
  ir::hash_t name_hash = 0;
  const char* never_traced = nullptr;  // why it always takes the CPU fallback
  bool identity = false;
  bool allows_cpu_tensors = false;
  // The output shape depends on Scalar argument values (arange(5) vs arange(7));
  // for every other op the Meta result depends only on their types, so values
  // stay out of the Meta cache's key (an optimizer's step size changes every
  // step, and a key per value would run the Meta kernel every step).
  bool shape_from_scalar_values = false;
  MetaFixup meta_fixup = nullptr;
  FillFactory fill;
  // A view op (a return aliases an argument without writing it). Functionalization
  // turns views into *_copy ops, so a view reaching the tracer runs below it.
  bool view = false;
  // For a view's *_copy form (slice_copy.Tensor), the view op itself
  // (slice.Tensor): its Meta kernel gives the strides and storage offset the
  // CPU reports for the view, which the copy's (a fresh contiguous tensor) does not.
  std::optional<c10::OperatorHandle> view_of;
  // Its arguments address the first tensor's storage (as_strided's strides
  // and offset): see layouts.h.
  bool addresses_storage = false;
  // Its kernel writes an argument its schema says it reads (hidden_mutations.h).
  bool hidden_mutation = false;
  // A collective (runtime/collectives.h): it runs exactly once, in trace order.
  bool collective = false;
  // Per argument: it may be a stale tensor (see LazyTensor) without error,
  // being a view's base (the view inherits it) or an out= argument (overwritten).
  std::vector<bool> stale_allowed;
  // The arguments the op writes (in-place, out=), and whether each is out=.
  std::vector<std::pair<size_t, bool>> written_args;
};

const TraceInfo& InfoFor(const c10::OperatorHandle& op) {
  thread_local absl::flat_hash_map<const c10::FunctionSchema*, std::unique_ptr<TraceInfo>> infos;
  const c10::FunctionSchema& schema = op.schema();
  std::unique_ptr<TraceInfo>& slot = infos[&schema];
  if (slot == nullptr) {
    slot = std::make_unique<TraceInfo>();
    slot->name = OpName(op);
    // Autograd's efficient zero tensors are plain zeros here (same arguments):
    // the CPU kernel makes a storage-less ZeroTensor nothing downstream can read.
    if (slot->name == "aten::_efficientzerotensor") slot->name = "aten::zeros";
    slot->name_hash = ir::Hash(slot->name);
    for (const c10::Argument& ret : schema.returns()) {
      if (!IsTensorType(ret.type()) && !IsListOf(ret.type(), c10::TypeKind::TensorType)) {
        slot->never_traced = "it returns a value that is not a tensor";
      }
    }
    const ir::OpTraits& traits = ir::TraitsOf(slot->name);
    if (traits.data_dependent) slot->never_traced = "its output shape depends on the data";
    slot->identity = traits.identity;
    slot->allows_cpu_tensors = traits.cpu_index_tensors;
    slot->shape_from_scalar_values = traits.shape_from_scalar_values;
    // A collective's world size and split sizes shape its result.
    slot->collective = runtime::IsCollectiveOp(slot->name);
    slot->shape_from_scalar_values |= slot->collective;
    slot->meta_fixup = MetaFixupFor(slot->name);
    slot->fill = FillFactoryFor(schema, traits);
    for (const c10::Argument& ret : schema.returns()) {
      if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) slot->view = true;
    }
    slot->view_of = ViewOpOf(schema);
    slot->addresses_storage = traits.addresses_storage;
    slot->hidden_mutation = HasHiddenMutation(slot->name);
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::Argument& arg = schema.arguments()[i];
      slot->stale_allowed.push_back((slot->view && i == 0) || arg.is_out());
      if (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) {
        slot->written_args.emplace_back(i, arg.is_out());
      }
    }
  }
  return *slot;
}

c10::ScalarType ScalarDtype(const c10::Scalar& s) {
  if (s.isBoolean()) return c10::ScalarType::Bool;
  if (s.isIntegral(false)) return c10::ScalarType::Long;
  return c10::ScalarType::Double;
}

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

void TraceUnobserved(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // At the op, not at a later sync: a forked child's device state is unusable.
  if (runtime::InBadFork()) runtime::ThrowIfError(runtime::BadForkError());
  const auto start = Clock::now();
  const c10::FunctionSchema& schema = op.schema();
  const TraceInfo& info = InfoFor(op);
  const std::string& name = info.name;
  const size_t num_args = schema.arguments().size();
  const size_t base = stack->size() - num_args;
  if (ABSL_PREDICT_FALSE(InsideSubclassOnFunctionalTensors(*stack, base))) {
    return TraceThroughFunctionalization(op, stack);
  }

  if (info.never_traced != nullptr) return CpuFallback(op, stack, info.never_traced);

  // Ops that return their input's value unchanged share its LazyTensor: below
  // functionalization values are not mutated, so detach/clone/alias cost
  // nothing, add no node (a model's parameters, detached when wrapped in
  // nn.Parameter, stay device data), and materializing either materializes both
  // (printing a detached copy does not leave the original to run again).
  if (info.identity) {
    const at::Tensor& input = (*stack)[base].toTensor();
    if (LazyTensorPtr lazy = TryGetLazy(input)) {
      // An alias keeps the input's strides and offset; a clone is laid out as
      // its memory format says (empty_like's rules).
      const TensorLayout layout =
          name == "aten::clone" ? CloneLayout(input, (*stack)[base + 1]) : TensorLayout::Of(input);
      torch::jit::drop(*stack, num_args);
      stack->push_back(MakeTensor(lazy, layout));
      return;
    }
  }
  if (ABSL_PREDICT_FALSE(info.hidden_mutation) && TraceHiddenMutation(op, stack)) return;
  if (info.addresses_storage) {
    const at::Tensor input = (*stack)[base].toTensor();
    if (IsNeuron(input) && !TensorLayout::Of(input).is_default()) {
      return TraceAddressingStorage(op, stack);
    }
  }

  // The device: that of the neuron tensors (all the same) or of the device argument.
  int device = -1;
  auto claim = [&](int d) {
    runtime::ThrowIfError(runtime::DeviceRegistry::Global().CheckIndex(d));
    TORCH_CHECK(device < 0 || device == d,
                "Expected all tensors to be on the same device, but "
                "found at least two devices, neuron:",
                device, " and neuron:", d, "! (in ", name, ")");
    device = d;
  };
  for (size_t i = base; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor() && IsNeuron(v.toTensor())) {
      claim(v.toTensor().device().index());
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor() && IsNeuron(e.toTensor())) claim(e.toTensor().device().index());
      }
    }
  }
  for (size_t i = base; i < stack->size() && device < 0; ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      device = v.toDevice().has_index() ? v.toDevice().index()
                                        : runtime::DeviceRegistry::Global().current_device();
      runtime::ThrowIfError(runtime::DeviceRegistry::Global().CheckIndex(device));
    }
  }
  if (device < 0) {
    // Meta tensors that dispatch as neuron ones: the fake tensors of a neuron
    // device (torch.distributed.tensor's sharding propagation, torch.compile)
    // wrap meta data. Their ops compute shapes only, on the Meta kernels.
    for (size_t i = base; i < stack->size(); ++i) {
      const c10::IValue& v = (*stack)[i];
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_meta()) {
        op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
        return;
      }
    }
    return CpuFallback(op, stack, "it has no neuron tensor or device argument");
  }

  std::vector<ir::Value> operands;
  std::vector<ir::Arg> args;
  // The Meta kernel's stack, with placeholders where meta tensors go; those are
  // made (from `deferred`) only if the Meta result is not cached.
  torch::jit::Stack meta_stack;
  struct DeferredMeta {
    size_t position;  // in meta_stack
    int element;      // in the list at `position`, or -1
    ir::Shape shape;
    TensorLayout layout;
  };
  std::vector<DeferredMeta> deferred;
  size_t list_position = 0;
  bool in_list = false;
  SignatureKey signature(info.name_hash);
  // Factories and promotions with Python floats take torch's default dtype
  // (set_default_dtype), which the arguments do not show.
  signature.Word(static_cast<uint64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  std::vector<const c10::GeneratorImpl*> generators;

  // A view's base and an out= argument may be stale (see LazyTensor): the
  // view inherits it, the out= write replaces the values.
  bool exempt_from_stale_check = false;
  auto tensor_operand = [&](const at::Tensor& t) -> std::optional<int32_t> {
    // Returns the operand index, or nullopt for an undefined tensor.
    if (!t.defined()) return std::nullopt;
    ir::Value value;
    at::Tensor meta;  // undefined: made later from `deferred`
    auto defer = [&](const ir::Shape& shape, TensorLayout layout) {
      deferred.push_back({in_list ? list_position : meta_stack.size(),
                          in_list ? static_cast<int>(meta_stack.size()) : -1, shape, std::move(layout)});
    };
    if (LazyTensorPtr lazy = TryGetLazy(t)) {
      if (!exempt_from_stale_check) lazy->CheckNoLostWrite();
      value = lazy->GetValue();
      TensorLayout layout = TensorLayout::Of(t);
      signature.Tagged(SignatureKey::kTensor).Add(value.node->shape_hash(value.index));
      if (!layout.is_default()) {
        signature.Tagged(SignatureKey::kLayout)
            .Word(static_cast<uint64_t>(layout.storage_offset))
            .Word(layout.strides.size());
        for (int64_t stride : layout.strides) signature.Word(static_cast<uint64_t>(stride));
      }
      defer(lazy->shape(), std::move(layout));
    } else if (t.device().is_cpu() && t.dim() == 0) {
      const bool wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
      const c10::Scalar item = t.item();
      value = ir::Value{ir::Node::MakeScalar(item, t.scalar_type(), wrapped), 0};
      meta = t;
      // A Python number's value never shapes the result; another CPU scalar
      // tensor's might (the Meta kernel sees its data).
      ir::hash_t value_hash = 0;
      if (!wrapped || info.shape_from_scalar_values) ir::HashIValue(c10::IValue(item), &value_hash);
      signature.Tagged(SignatureKey::kCpuScalar)
          .Word(static_cast<uint64_t>(t.scalar_type()))
          .Word(wrapped)
          .Add(value_hash);
    } else if (t.device().is_cpu() && info.allows_cpu_tensors) {
      auto data = runtime::ValueOrThrow(runtime::DeviceData::FromHost(device, t));
      value = LazyTensor::FromData(data)->GetValue();
      defer(value.shape(), TensorLayout{});
      signature.Tagged(SignatureKey::kTensor).Add(value.node->shape_hash(value.index));
    } else {
      TORCH_CHECK(false,
                  "Expected all tensors to be on the same device, but found at least two "
                  "devices, neuron:",
                  device, " and ", t.device(), "! (in ", name, "; move the tensor with .to('neuron') first)");
    }
    operands.push_back(std::move(value));
    meta_stack.push_back(meta);
    return static_cast<int32_t>(operands.size() - 1);
  };
  auto scalar_operand = [&](const c10::Scalar& s) {
    operands.push_back(ir::Value{ir::Node::MakeScalar(s, ScalarDtype(s)), 0});
    // The value is never part of the node's hash (it is a parameter), and part
    // of the Meta signature only where it shapes the result (arange).
    ir::hash_t value_hash = 0;
    if (info.shape_from_scalar_values) ir::HashIValue(c10::IValue(s), &value_hash);
    signature.Tagged(SignatureKey::kScalar).Word(static_cast<uint64_t>(ScalarDtype(s))).Add(value_hash);
    return static_cast<int32_t>(operands.size() - 1);
  };

  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[base + i];
    // real_type(): a ScalarType, Layout or MemoryFormat argument's type() is int.
    const c10::TypePtr& type = schema.arguments()[i].real_type();
    exempt_from_stale_check = info.stale_allowed[i];
    if (v.isTensor()) {
      std::optional<int32_t> index = tensor_operand(v.toTensor());
      if (index) {
        args.push_back(ir::Arg::Operand(*index));
      } else {
        args.push_back(ir::Arg::Attr(c10::IValue()));
        meta_stack.push_back(c10::IValue());
      }
    } else if (IsListOf(type, c10::TypeKind::TensorType) && v.isList()) {
      std::vector<int32_t> indices;
      torch::jit::Stack saved_meta;
      saved_meta.swap(meta_stack);
      list_position = saved_meta.size();
      in_list = true;
      for (const c10::IValue& e : v.toListRef()) {
        std::optional<int32_t> index = e.isTensor() ? tensor_operand(e.toTensor()) : std::nullopt;
        indices.push_back(index.value_or(-1));
        if (!index) meta_stack.push_back(c10::IValue());
      }
      const bool optional_list = Unwrapped(type->castRaw<c10::ListType>()->getElementType()) !=
                                 type->castRaw<c10::ListType>()->getElementType();
      c10::IValue meta_list;
      if (optional_list) {
        c10::List<std::optional<at::Tensor>> list;
        for (const c10::IValue& m : meta_stack) {
          // A deferred slot holds an undefined tensor until it is made.
          list.push_back(m.isTensor() ? std::optional<at::Tensor>(m.toTensor()) : std::nullopt);
        }
        meta_list = list;
      } else {
        std::vector<at::Tensor> list;
        for (const c10::IValue& m : meta_stack) list.push_back(m.toTensor());
        meta_list = list;
      }
      meta_stack.swap(saved_meta);
      in_list = false;
      meta_stack.push_back(meta_list);
      signature.Tagged(SignatureKey::kList).Word(indices.size());
      for (int32_t index : indices) signature.Word(static_cast<uint64_t>(index));
      args.push_back(ir::Arg::OperandList(std::move(indices)));
    } else if (IsNumberType(type) && !v.isNone()) {
      const c10::Scalar s = v.toScalar();
      if (s.isComplex()) return CpuFallback(op, stack, "it takes a complex scalar");
      args.push_back(ir::Arg::Operand(scalar_operand(s)));
      meta_stack.push_back(v);
    } else if (IsListOf(type, c10::TypeKind::NumberType) && v.isList()) {
      std::vector<int32_t> indices;
      for (const c10::IValue& e : v.toListRef()) indices.push_back(scalar_operand(e.toScalar()));
      args.push_back(ir::Arg::OperandList(std::move(indices)));
      meta_stack.push_back(v);
    } else if (IsGeneratorType(type)) {
      at::Generator gen = v.isNone() ? runtime::DefaultNeuronGenerator(static_cast<c10::DeviceIndex>(device))
                                     : v.toGenerator();
      TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1, "expected a neuron generator for ",
                  name, " on neuron:", device, ", got a generator for ", gen.device());
      generators.push_back(gen.unsafeGetGeneratorImpl());
      operands.push_back(ir::Value{ir::Node::MakeGenerator(std::make_shared<GeneratorLeaf>(gen)), 0});
      args.push_back(ir::Arg::Operand(static_cast<int32_t>(operands.size() - 1)));
      meta_stack.push_back(c10::IValue());
      signature.Tagged(SignatureKey::kGenerator);
    } else if (schema.arguments()[i].name() == "pin_memory" && v.isBool() && v.toBool()) {
      TORCH_CHECK(false, "only CPU tensors can be pinned, not neuron tensors (in ", name, ")");
    } else if (Unwrapped(type)->kind() == c10::TypeKind::LayoutType && v.isInt() &&
               static_cast<c10::Layout>(v.toInt()) != c10::kStrided) {
      TORCH_CHECK(false, "neuron devices only hold strided tensors, got layout ",
                  static_cast<c10::Layout>(v.toInt()), " (in ", name, ")");
    } else if (Unwrapped(type)->kind() == c10::TypeKind::ScalarTypeType && v.isInt()) {
      runtime::CheckSupportedDtype(static_cast<c10::ScalarType>(v.toInt()));
      args.push_back(ir::Arg::Attr(v));
      meta_stack.push_back(v);
      signature.Tagged(SignatureKey::kDtype).Word(static_cast<uint64_t>(v.toInt()));
    } else if (v.isDevice()) {
      args.push_back(ir::Arg::Attr(v));
      const bool neuron = v.toDevice().type() == c10::DeviceType::PrivateUse1;
      meta_stack.push_back(neuron ? c10::IValue(c10::Device(c10::DeviceType::Meta)) : v);
      signature.Tagged(SignatureKey::kDevice)
          .Word(static_cast<uint64_t>(v.toDevice().type()))
          .Word(static_cast<uint64_t>(v.toDevice().index()));
    } else {
      ir::hash_t h = 0;
      if (!ir::HashIValue(v, &h)) {
        return CpuFallback(op, stack, std::string("it takes a ") + v.tagKind() + " argument");
      }
      args.push_back(ir::Arg::Attr(v));
      meta_stack.push_back(v);
      signature.Tagged(SignatureKey::kAttr).Add(h);
    }
  }

  const ir::hash_t op_key = signature.Hash();
  std::optional<MetaResult> meta = InferMeta(op, op_key, info.view_of, info.meta_fixup, [&] {
    for (const DeferredMeta& d : deferred) {
      at::Tensor t = MetaTensor(d.shape, d.layout);
      c10::IValue& slot = meta_stack[d.position];
      if (d.element < 0) {
        slot = t;
      } else if (slot.isTensorList()) {
        slot.toTensorList().set(d.element, t);
      } else {
        slot.toOptionalTensorList().set(d.element, t);
      }
    }
    return std::move(meta_stack);
  });
  if (!meta) return CpuFallback(op, stack, "it has no Meta kernel for these inputs");
  for (const ir::Shape& s : meta->shapes) {
    if (s.dtype() != c10::ScalarType::Undefined) runtime::CheckSupportedDtype(s.dtype());
  }

  if (info.fill.is_factory && meta->shapes.size() == 1) {
    const ir::Shape& shape = meta->shapes[0];
    const c10::Scalar value = info.fill.value_arg >= 0 ? (*stack)[base + info.fill.value_arg].toScalar()
                                                       : c10::Scalar(info.fill.constant);
    auto data = std::make_shared<runtime::DeviceData>(device, shape.dtype(), shape.sizes());
    runtime::ExecutionQueue::ForDevice(device).Enqueue([data, value]() {
      data->FulfillWithValue(value);
      return data->Wait();
    });
    torch::jit::drop(*stack, num_args);
    LazyTensorPtr t = LazyTensor::FromData(std::move(data));
    stack->push_back(MakeTensor(t, meta->layouts[0]));
    TraceCounters().ops->Add(1);
    return;
  }
  // uint16/32/64 reach only the few CPU kernels PyTorch has for them.
  bool host_only = false;
  for (const ir::Shape& s : meta->shapes) host_only |= runtime::IsHostOnlyDtype(s.dtype());
  for (const ir::Value& v : operands) host_only |= runtime::IsHostOnlyDtype(v.shape().dtype());
  // Views (functionalization's *_copy ops) stay traced: they move elements,
  // which every kernel does for any dtype, and keep the view's layout.
  if (ABSL_PREDICT_FALSE(host_only) && !info.view_of) {
    return CpuFallback(op, stack,
                       "it reads or writes uint16, uint32 or uint64, which run on "
                       "PyTorch's CPU kernels");
  }

  // In-place and out= ops: each written argument must come back as a result.
  std::vector<at::Tensor> originals;
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[base + i];
    originals.push_back(v.isTensor() ? v.toTensor() : at::Tensor());
  }
  for (const auto& [i, is_out] : info.written_args) {
    if (!originals[i].defined() || !IsNeuron(originals[i])) continue;
    LazyTensorPtr target = GetLazy(originals[i]);
    if (is_out) target->ClearStale();
    target->RecordWriteIntoView(name);
  }
  std::vector<int> written_by_return(schema.returns().size(), -1);
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const c10::AliasInfo* alias = schema.returns()[r].alias_info();
    if (alias == nullptr || !alias->isWrite()) continue;
    for (size_t i = 0; i < num_args; ++i) {
      const c10::AliasInfo* in = schema.arguments()[i].alias_info();
      if (in != nullptr && in->isWrite() && in->beforeSets() == alias->beforeSets() &&
          originals[i].defined() && IsNeuron(originals[i])) {
        written_by_return[r] = static_cast<int>(i);
      }
    }
    if (written_by_return[r] < 0) return CpuFallback(op, stack, "it writes a non-neuron argument");
  }
  for (size_t i = 0; i < num_args; ++i) {
    const c10::AliasInfo* in = schema.arguments()[i].alias_info();
    if (in == nullptr || !in->isWrite()) continue;
    bool returned = false;
    for (int w : written_by_return) returned |= w == static_cast<int>(i);
    if (!returned) return CpuFallback(op, stack, "it writes an argument it does not return");
  }

  static ir::NodeInterner* interner = new ir::NodeInterner();
  // Eager mode always records the user's line: its execution errors name it.
  // (An op interned earlier keeps the line it was first traced from.)
  std::string source;
  if (GlobalConfig().ir_debug || CurrentMode() == ExecutionMode::kEager) source = CurrentSourceLocation();
  ir::NodePtr node = interner->Intern(
      ir::Node::MakeOp(name, std::move(operands), std::move(args), meta->shapes, std::move(source)));

  // A view's base: its first tensor argument.
  LazyTensorPtr view_base;
  if (info.view && num_args > 0 && originals[0].defined() && IsNeuron(originals[0])) {
    view_base = GetLazy(originals[0]);
  }
  torch::jit::drop(*stack, num_args);
  std::vector<LazyTensorPtr> created;
  int output = 0;
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const int count = meta->counts[r];
    if (count < 0) {
      ir::Value value{node, output++};
      if (node->shape(value.index).dtype() == c10::ScalarType::Undefined) {
        stack->push_back(at::Tensor());
      } else if (written_by_return[r] >= 0) {
        const at::Tensor& target = originals[written_by_return[r]];
        GetLazy(target)->SetPending(value);
        GetImpl(target)->RefreshSizes(meta->layouts[value.index]);
        created.push_back(GetLazy(target));
        stack->push_back(target);
      } else {
        LazyTensorPtr t = LazyTensor::FromValue(value, device);
        if (info.view && view_base != nullptr) t->set_view_base(view_base);
        created.push_back(t);
        stack->push_back(MakeTensor(t, meta->layouts[value.index]));
      }
    } else {
      std::vector<at::Tensor> list;
      for (int k = 0; k < count; ++k) {
        const int index = output++;
        LazyTensorPtr t = LazyTensor::FromValue(ir::Value{node, index}, device);
        created.push_back(t);
        list.push_back(MakeTensor(t, meta->layouts[index]));
      }
      stack->push_back(list);
    }
  }
  // Every draw runs exactly once, in trace order, even if its result is never
  // read: the next sync of the device takes it along (graph_executor.cc).
  // Collectives too: every rank must run each one, in the order it traced them.
  if (!generators.empty() || info.collective) AddPendingDraw(device, node);
  TraceCounters().ops->Add(1);
  TraceCounters().nanos->Add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  if (CurrentMode() == ExecutionMode::kEager) EagerScheduler().OnOpTraced(device, op_key, created);
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
  runtime::profiler::Scope scope("trace", op.operator_name().name);
  if (ABSL_PREDICT_FALSE(scope.recording())) scope.set_source(CurrentSourceLocation());
  if (ABSL_PREDICT_FALSE(HasTraceObservers())) return TraceObserved(op, stack);
  TraceUnobserved(op, stack);
}

int RegisterTracerForCompositeOps() {
  static int registered = [] {
    auto* lib =
        new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    int count = 0;
    ForEachAtenOp([&](const c10::OperatorHandle& op, const std::string& overload) {
      const bool composite =
          op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
      if (!composite || op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return;
      // In-place and out= ops too: functionalization keeps them from user code,
      // but composite kernels and Python custom ops running below it mutate
      // fresh neuron tensors, and the device-generic composite kernels of those
      // ops would reach a storage-less tensor's (missing) memory.
      const ir::OpTraits& traits = ir::TraitsOf(OpName(op));
      if (traits.data_dependent) return;
      if (UsesDefaultGeneratorImplicitly(op, traits)) return;
      bool tensor_returns = true;
      for (const c10::Argument& ret : op.schema().returns()) {
        tensor_returns &= IsTensorType(ret.type()) || IsListOf(ret.type(), c10::TypeKind::TensorType);
      }
      if (!tensor_returns) return;
      lib->impl(overload.c_str(), torch::CppFunction::makeFromBoxedFunction<&TraceOp>());
      ++count;
    });
    return count;
  }();
  return registered;
}

// Quantized dtypes on neuron dispatch to QuantizedPrivateUse1: refuse them with
// the same TypeError as every other unsupported dtype, naming it.
void RejectQuantized(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t num_args = op.schema().arguments().size();
  for (size_t i = stack->size() - num_args; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && c10::isQIntType(v.toTensor().scalar_type())) {
      runtime::CheckSupportedDtype(v.toTensor().scalar_type());
    }
    if (op.schema().arguments()[i - (stack->size() - num_args)].name() == "dtype" && v.isInt()) {
      runtime::CheckSupportedDtype(static_cast<c10::ScalarType>(v.toInt()));
    }
  }
  TORCH_CHECK_TYPE(false, "neuron devices do not support quantized tensors (in ", OpName(op), ")");
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&RejectQuantized>());
}

// Sparse layouts on neuron (sparse_cpu.to("neuron"), zeros(layout=sparse_coo,
// device="neuron")) dispatch to the sparse keys: say so, and what to do.
void RejectSparse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, kSparseUnsupported, " (in ", OpName(op), ")");
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&RejectSparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&RejectSparse>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&TraceOp>()); }

}  // namespace torch_neuron::lazy

// Kernels that move data across the device boundary or read it: copy (the
// functional form of copy_), _to_copy (.to(), .cpu()), _copy_from (copies into
// CPU tensors), _local_scalar_dense (.item(), bool(), printing) and resize_.
// Everything else is traced (tracer.cc).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/MemoryFormat.h>
#include <optional>
#include <utility>

#include "lazy/aten_copy.h"
#include "lazy/bridge.h"
#include "lazy/cpu_fallback.h"
#include "lazy/graph_executor.h"
#include "lazy/layouts.h"
#include "lazy/ran_values.h"
#include "lazy/tensor_impl.h"
#include "lazy/tracer.h"
#include "runtime/device_registry.h"
#include "runtime/dtype_checks.h"
#include "runtime/execution_queue.h"
#include "runtime/fork_guard.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

// Runs the pending graph of `t` (if any) and downloads its value. An execution
// error reaches the user here, once: the queue forgets it.
at::Tensor Materialize(const LazyTensorPtr& t) {
  t->CheckNoLostWrite();
  GraphExecutor::Get().CheckReadAllowed(t->device());
  GraphExecutor::Get().Sync({t});
  absl::StatusOr<at::Tensor> host = t->data()->ToHost();
  if (!host.ok()) runtime::ExecutionQueue::ForDevice(t->device()).ForgetError(host.status());
  return runtime::ValueOrThrow(std::move(host));
}

// A forked child refuses device work before it calls any ATen op: a parent
// thread may have held an op's one-time guard at the fork.
void CheckNotInBadFork() {
  if (runtime::InBadFork()) runtime::ThrowIfError(runtime::BadForkError());
}

// Uploads `host`, converted to `dtype` and broadcast to `sizes`, to `device`.
LazyTensorPtr Upload(const at::Tensor& host, c10::ScalarType dtype, c10::IntArrayRef sizes, int device) {
  runtime::CheckSupportedDtype(dtype);
  at::Tensor ready = host.to(dtype).expand(sizes);
  return LazyTensor::FromData(runtime::ValueOrThrow(runtime::DeviceData::FromHost(device, ready)));
}

}  // namespace

// aten::copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor
void CopyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  CheckNotInBadFork();
  const at::Tensor self = (*stack)[stack->size() - 3].toTensor();
  const at::Tensor src = (*stack)[stack->size() - 2].toTensor();
  LazyTensorPtr dst = GetLazy(self);
  LazyTensorPtr from = TryGetLazy(src);
  if (from != nullptr && from->device() == dst->device()) {
    // Same shape and dtype: the copy's value is the source's, shared like an
    // identity op's. No node: loading a state_dict into a model (param.copy_)
    // leaves the parameters device data, and the next step's graph is unchanged.
    if (from->shape() == dst->shape()) {
      const TensorLayout layout = TensorLayout::Of(self);
      torch::jit::drop(*stack, 3);
      stack->push_back(MakeTensor(from, layout));
      return;
    }
    return TraceOp(op, stack);
  }
  TORCH_CHECK(from != nullptr || src.device().is_cpu(), "cannot copy from ", src.device(), " to ",
              self.device(), ": neuron tensors copy to and from CPU tensors only");
  at::Tensor host = from != nullptr ? Materialize(from) : src;
  const TensorLayout layout = TensorLayout::Of(self);
  torch::jit::drop(*stack, 3);
  stack->push_back(MakeTensor(Upload(host, dst->shape().dtype(), self.sizes(), dst->device()), layout));
}

// aten::_to_copy(Tensor self, *, ScalarType? dtype, Layout? layout, Device? device,
//                bool? pin_memory, bool non_blocking, MemoryFormat? memory_format)
void ToCopyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  CheckNotInBadFork();
  const size_t base = stack->size() - 7;
  const at::Tensor source = (*stack)[base].toTensor();
  const std::optional<c10::ScalarType> dtype = (*stack)[base + 1].toOptional<c10::ScalarType>();
  const std::optional<c10::Device> device = (*stack)[base + 3].toOptional<c10::Device>();
  if (!IsNeuron(source)) {
    // Host to device: BackendSelect sends CPU tensors here by the device argument.
    TORCH_CHECK(source.device().is_cpu(), "cannot copy from ", source.device(),
                " to neuron: neuron tensors copy to and from CPU tensors only");
    const int target =
        device->has_index() ? device->index() : runtime::DeviceRegistry::Global().current_device();
    const c10::ScalarType target_dtype = dtype.value_or(source.scalar_type());
    LazyTensorPtr uploaded = Upload(source, target_dtype, source.sizes(), target);
    const TensorLayout layout = CloneLayout(source, (*stack)[base + 6]);
    torch::jit::drop(*stack, 7);
    stack->push_back(MakeWrappedTensor(uploaded, layout));
    return;
  }
  LazyTensorPtr self = GetLazy(source);
  const c10::ScalarType target_dtype = dtype.value_or(self->shape().dtype());
  const bool to_neuron = !device || device->type() == c10::DeviceType::PrivateUse1;

  if (to_neuron) {
    const int target = device && device->has_index() ? device->index() : self->device();
    at::Tensor result;
    if (target == self->device()) {
      TraceOp(op, stack);
      result = stack->back().toTensor();
      stack->pop_back();
    } else {
      at::Tensor host = Materialize(self);
      const TensorLayout layout = CloneLayout(source, (*stack)[base + 6]);
      torch::jit::drop(*stack, 7);
      result = MakeTensor(Upload(host, target_dtype, host.sizes(), target), layout);
    }
    // Below functionalization every caller wants the traced tensor itself:
    // ToCopyFunctionalize (below) wraps it for the user; the functionalization
    // fallback wraps the results of a composite that called _to_copy (.to()
    // and type_as under inference_mode); FunctionalTensorWrapper::replace_
    // takes it unwrapped.
    stack->push_back(std::move(result));
    return;
  }
  TORCH_CHECK(device->is_cpu(), "cannot copy a neuron tensor to ", *device,
              ": neuron tensors copy to and from CPU tensors only");
  at::Tensor host = Materialize(self);
  if (target_dtype != host.scalar_type()) host = host.to(target_dtype);
  // Laid out as the CPU's .to() lays out a copy of the tensor `source` reports.
  const TensorLayout laid_out = CloneLayout(source, (*stack)[base + 6]);
  if (!laid_out.is_default()) {
    host = at::empty_strided(host.sizes(), laid_out.strides, host.options()).copy_(host);
  }
  torch::jit::drop(*stack, 7);
  stack->push_back(host);
}

namespace {

// _to_copy at Functionalize for neuron tensors: functionalization's own kernel
// leaves a copy to a device that is not XLA or Lazy unwrapped (the pass ends
// there), which neuron's wrapped tensors cannot be.
class ToCopyFunctionalize final : public c10::OperatorKernel {
 public:
  explicit ToCopyFunctionalize(c10::SafeKernelFunction original) : original_(std::move(original)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t base = stack->size() - op.schema().arguments().size();
    const at::Tensor self = (*stack)[base].toTensor();
    // Python's functionalization (torch.func.functionalize, torch.compile's
    // mode) puts the key in TLS and wraps its own tensors: its kernel is right.
    if (!IsNeuron(self) || !at::functionalization::impl::isFunctionalTensor(self) ||
        c10::impl::tls_local_dispatch_key_set().included_.has(c10::DispatchKey::Functionalize)) {
      original_.callBoxed(op, ks, stack);
      return;
    }
    at::functionalization::impl::sync(self);
    (*stack)[base] = at::functionalization::impl::from_functional_tensor(self);
    {
      at::AutoDispatchSkipFunctionalize below;
      op.callBoxed(stack);
    }
    const at::Tensor out = stack->back().toTensor();
    if (IsNeuron(out) && !at::functionalization::impl::isFunctionalTensor(out)) {
      stack->back() = MakeWrappedTensor(GetLazy(out), TensorLayout::Of(out));
    }
  }

 private:
  c10::SafeKernelFunction original_;
};

}  // namespace

void RegisterToCopyFunctionalize(torch::Library& library) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_to_copy", "");
  library.impl("_to_copy", torch::CppFunction::makeFromBoxedFunctor(std::make_unique<ToCopyFunctionalize>(
                               op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize))));
}

// aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!),
// reached below functionalization (composite kernels filling fresh tensors).
void InPlaceCopyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor self = (*stack)[stack->size() - 3].toTensor();
  const at::Tensor src = (*stack)[stack->size() - 2].toTensor();
  LazyTensorPtr from = TryGetLazy(src);
  NeuronTensorImpl* impl = GetImpl(self);
  if (impl == nullptr || (from != nullptr && from->device() == impl->tensor()->device())) {
    return TraceOp(op, stack);
  }
  TORCH_CHECK(from != nullptr || src.device().is_cpu(), "cannot copy from ", src.device(), " to ",
              self.device(), ": neuron tensors copy to and from CPU tensors only");
  at::Tensor host = from != nullptr ? Materialize(from) : src;
  LazyTensorPtr target = impl->tensor();
  target->SetData(Upload(host, target->shape().dtype(), self.sizes(), target->device())->data());
  torch::jit::drop(*stack, 3);
  stack->push_back(self);
}

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  // `self` is the source.
  if (!IsNeuron(dst)) {
    TORCH_CHECK(dst.device().is_cpu(), "cannot copy from ", self.device(), " to ", dst.device(),
                ": neuron tensors copy to and from CPU tensors only");
    dst.copy_(Materialize(GetLazy(self)));
    return dst;
  }
  NeuronTensorImpl* impl = GetImpl(dst);
  TORCH_CHECK(impl != nullptr, "_copy_from into a neuron tensor that is not a neuron tensor impl");
  LazyTensorPtr target = impl->tensor();
  LazyTensorPtr from = TryGetLazy(self);
  at::Tensor host = from != nullptr ? Materialize(from) : self;
  target->SetData(Upload(host, target->shape().dtype(), dst.sizes(), target->device())->data());
  impl->RefreshSizes(impl->layout());
  return dst;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (IsNeuron(dst)) {
    NeuronTensorImpl* impl = GetImpl(dst);
    LazyTensorPtr from = TryGetLazy(self);
    at::Tensor host = from != nullptr ? Materialize(from) : self;
    impl->tensor()->SetData(
        Upload(host, impl->tensor()->shape().dtype(), host.sizes(), impl->tensor()->device())->data());
    impl->RefreshSizes();
    return dst;
  }
  dst.resize_(self.sizes());
  return CopyFrom(self, dst, false);
}

namespace {

// The element a 0-dim tensor is of a 1-d device buffer, when it is one (an
// element of a materialized vector, as iterating over it or v[i].item()
// reads it): the buffer and the element's index. Reading it directly skips a
// graph per element (each index would be a graph of its own).
// The unbind or select node whose output `t` (0-dim) is, or nullptr.
const ir::Node* ElementNode(const LazyTensor& t) {
  if (!t.is_pending() || t.shape().dim() != 0) return nullptr;
  const ir::Node& node = *t.pending().node;
  if (node.kind() != ir::NodeKind::kOp || node.operands().empty() || node.args().size() < 2) return nullptr;
  // A select's index is an operand (a position: tracer.cc), unbind has one operand.
  const size_t operands = node.op() == "aten::select_copy.int" ? 2 : 1;
  if (node.operands().size() != operands) return nullptr;
  if (node.op() != "aten::unbind_copy.int" && node.op() != "aten::select_copy.int") return nullptr;
  return &node;
}

// The select's index: a position parameter's value, or an int attribute.
std::optional<int64_t> SelectIndex(const ir::Node& select) {
  if (select.args().size() != 3) return std::nullopt;
  const ir::Arg& arg = select.args()[2];
  if (arg.kind == ir::Arg::Kind::kAttr) {
    return arg.attr.isInt() ? std::optional<int64_t>(arg.attr.toInt()) : std::nullopt;
  }
  const ir::Node& leaf = *select.operands()[arg.operands[0]].node;
  if (leaf.kind() != ir::NodeKind::kScalar && leaf.kind() != ir::NodeKind::kConstant) return std::nullopt;
  return leaf.scalar().toLong();
}

std::optional<std::pair<runtime::DeviceDataPtr, int64_t>> ElementOfBuffer(const LazyTensor& t) {
  const ir::Node* element = ElementNode(t);
  if (element == nullptr) return std::nullopt;
  const ir::Value& value = t.pending();
  const ir::Node& node = *element;
  const ir::Value source = RanValues::Global().Resolve(node.operands()[0]);
  if (source.node->kind() != ir::NodeKind::kDeviceData) return std::nullopt;
  const runtime::DeviceDataPtr* buffer = LeafBuffer(*source.node);
  if (buffer == nullptr || (*buffer)->sizes().size() != 1) return std::nullopt;
  const int64_t length = (*buffer)->sizes()[0];
  const c10::IValue& dim = node.args()[1].attr;
  if (!dim.isInt() || (dim.toInt() != 0 && dim.toInt() != -1)) return std::nullopt;
  int64_t index = 0;
  if (node.op() == "aten::unbind_copy.int") {
    index = value.index;
  } else if (std::optional<int64_t> selected = SelectIndex(node)) {
    index = *selected < 0 ? *selected + length : *selected;
  } else {
    return std::nullopt;
  }
  if (index < 0 || index >= length) return std::nullopt;
  return std::make_pair(*buffer, index);
}

// A 0-dim element (unbind or select) of a pending 1-d value: runs that value
// as a graph of its own and records its node as run (RanValues), so that this
// element and the vector's others read it from its buffer. Iterating over a
// pending vector ran its whole graph once per element.
void MaterializeVectorOf(const LazyTensor& t) {
  const ir::Node* element = ElementNode(t);
  if (element == nullptr) return;
  const ir::Value& vector = element->operands()[0];
  if (vector.node->kind() != ir::NodeKind::kOp || vector.node->num_outputs() != 1 ||
      RanValues::Global().HasRun(*vector.node) || vector.shape().dim() != 1) {
    return;
  }
  LazyTensorPtr base = LazyTensor::FromValue(vector, t.device());
  GraphExecutor::Get().Sync({base});
  RanValues::Global().Record(vector.node, {base->GetValue().node});
}

}  // namespace

at::Scalar LocalScalarDense(const at::Tensor& self) {
  const LazyTensorPtr& t = GetLazy(self);
  GraphExecutor::Get().CheckReadAllowed(t->device());
  MaterializeVectorOf(*t);
  if (auto element = ElementOfBuffer(*t)) {
    t->CheckNoLostWrite();
    absl::StatusOr<c10::Scalar> value = element->first->ReadElement(element->second);
    if (value.ok()) return *value;
    // A failed buffer: the graph below reports its error as a read of it does.
  }
  return Materialize(t).item();
}

const at::Tensor& Resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  NeuronTensorImpl* impl = GetImpl(self);
  TORCH_CHECK(impl != nullptr, "resize_ of a tensor that is not a neuron tensor");
  LazyTensorPtr lazy = impl->tensor();
  // As on the CPU, the strides become the memory format's contiguous ones
  // (the data stays dense, in logical order: the layout is metadata).
  TensorLayout layout;
  const c10::MemoryFormat format = memory_format.value_or(c10::MemoryFormat::Contiguous);
  if (format == c10::MemoryFormat::ChannelsLast && size.size() == 4) {
    const std::vector<int64_t> strides = c10::get_channels_last_strides_2d(size);
    layout.strides.assign(strides.begin(), strides.end());
  } else if (format == c10::MemoryFormat::ChannelsLast3d && size.size() == 5) {
    const std::vector<int64_t> strides = c10::get_channels_last_strides_3d(size);
    layout.strides.assign(strides.begin(), strides.end());
  } else {
    TORCH_CHECK(format == c10::MemoryFormat::Contiguous || format == c10::MemoryFormat::Preserve,
                "resize_: memory format ", format, " needs a ",
                format == c10::MemoryFormat::ChannelsLast ? "4" : "5", "-d size, got ", size.size(), "-d");
  }
  if (HasContiguousStrides(size, layout.strides)) layout.strides.clear();
  if (c10::IntArrayRef(lazy->shape().sizes()) == size) {
    if (memory_format.has_value() && format != c10::MemoryFormat::Preserve) impl->RefreshSizes(layout);
    return self;
  }
  // The new contents are unspecified, as for resize_ on any device; out= ops
  // resize their output and then write all of it.
  at::Tensor fresh = at::empty(
      size, at::TensorOptions()
                .dtype(lazy->shape().dtype())
                .device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(lazy->device())));
  lazy->SetPending(GetLazy(fresh)->pending());
  impl->RefreshSizes(layout);
  return self;
}

}  // namespace torch_neuron::lazy

#include "lazy/bridge.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/lift_fresh.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <optional>
#include <utility>
#include <memory>

#include "lazy/aten_ops.h"
#include "lazy/functionalize_fast.h"
#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {

bool IsNeuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

NeuronTensorImpl* GetImpl(const at::Tensor& t) {
  if (!IsNeuron(t)) return nullptr;
  if (at::functionalization::impl::isFunctionalTensor(t)) {
    at::functionalization::impl::sync(t);
    return GetImpl(at::functionalization::impl::from_functional_tensor(t));
  }
  return dynamic_cast<NeuronTensorImpl*>(t.unsafeGetTensorImpl());
}

LazyTensorPtr TryGetLazy(const at::Tensor& t) {
  NeuronTensorImpl* impl = GetImpl(t);
  return impl == nullptr ? nullptr : impl->tensor();
}

LazyTensorPtr GetLazy(const at::Tensor& t) {
  LazyTensorPtr lazy = TryGetLazy(t);
  TORCH_CHECK(lazy != nullptr, "expected a neuron tensor, got a tensor on ",
              t.defined() ? t.device().str() : std::string("no device (undefined)"));
  return lazy;
}

at::Tensor MakeWrappedTensor(LazyTensorPtr tensor, const TensorLayout& layout) {
  at::Tensor inner = at::Tensor(c10::make_intrusive<NeuronTensorImpl>(std::move(tensor), layout));
  return at::functionalization::impl::to_functional_tensor(inner);
}

at::Tensor MakeWrappedTensor(LazyTensorPtr tensor) { return MakeWrappedTensor(std::move(tensor), {}); }

at::Tensor MakeTensor(LazyTensorPtr tensor) { return MakeTensor(std::move(tensor), {}); }

namespace {

at::Tensor WrapUnlessBelowFunctionalization(at::Tensor inner) {
  const bool below_functionalization =
      c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Functionalize);
  if (below_functionalization) return inner;
  return at::functionalization::impl::to_functional_tensor(inner);
}

}  // namespace

at::Tensor MakeTensor(LazyTensorPtr tensor, const TensorLayout& layout) {
  return WrapUnlessBelowFunctionalization(
      at::Tensor(c10::make_intrusive<NeuronTensorImpl>(std::move(tensor), layout)));
}

at::Tensor MakeViewTensor(LazyTensorPtr tensor, const TensorLayout& layout) {
  auto impl = c10::make_intrusive<NeuronTensorImpl>(std::move(tensor), layout);
  impl->SetInference(false);
  return WrapUnlessBelowFunctionalization(at::Tensor(std::move(impl)));
}

namespace {

// The kernels lift_fresh had at Functionalize and copy_ at ADInplaceOrView
// before neuron's, for calls that are not neuron's; set before registering.
std::optional<c10::SafeKernelFunction>& OriginalLiftFresh() {
  static std::optional<c10::SafeKernelFunction> original;
  return original;
}
std::optional<c10::SafeKernelFunction>& OriginalCopy() {
  static std::optional<c10::SafeKernelFunction> original;
  return original;
}

// Calls `original` as the dispatcher would have called it with `args`; the
// op's first return.
template <class... Args>
at::Tensor CallOriginal(const c10::SafeKernelFunction& original, c10::DispatchKeySet ks, Args&&... args) {
  const c10::OperatorHandle& op = original.opHandle();
  torch::jit::Stack stack = c10::impl::boxArgs<Args...>(std::forward<Args>(args)...);
  original.callBoxed(op, ks, &stack);
  return stack.back().toTensor();
}

// lift_fresh at Functionalize, for a neuron tensor; any other goes to
// PyTorch's kernel.
at::Tensor LiftFresh(c10::DispatchKeySet ks, const at::Tensor& self) {
  if (!IsNeuron(self) || !at::functionalization::impl::isFunctionalTensor(self)) {
    return CallOriginal(*OriginalLiftFresh(), ks, self);
  }
  if (c10::impl::TorchDispatchModeTLS::any_modes_set()) {
    // torch.tensor(data, device="neuron") under a Python dispatch mode:
    // PyTorch made the tensor with the modes off, and lift_fresh is how the
    // modes get to see it (torch.compile's FakeTensorMode turns it into a
    // fake; a CUDA tensor reaches them the same way, being no functional
    // wrapper). Functionalization would keep it from them: pass it below.
    return at::_ops::lift_fresh::redispatch(ks & c10::after_func_keyset, self);
  }
  // A fresh tensor nobody else holds: no alias is needed (PyTorch's kernel
  // returns a view of it, which graph export relies on).
  return self;
}

// copy_ at ADInplaceOrView, for a plain `self` written from a neuron
// functional tensor; any other call goes to PyTorch's kernel.
// Functionalization refuses to write a plain tensor from a functional one, and
// that is what `cpu_tensor.copy_(neuron_tensor)` is, from Python or from C++
// (DDP's start-up checks read a broadcast back into a CPU tensor). Here the
// functional source is unwrapped to its current value first, which any
// device's copy_ can read. Inference tensors skip this key: for them, Python
// callers still have _tensor_support.py's copy_, which reads the value first.
at::Tensor& CopyInPlaceOrView(c10::DispatchKeySet ks, at::Tensor& self, const at::Tensor& src,
                              bool non_blocking) {
  const bool plain_from_functional = IsNeuron(src) && at::functionalization::impl::isFunctionalTensor(src) &&
                                     !at::functionalization::impl::isFunctionalTensor(self);
  if (!plain_from_functional) {
    CallOriginal(*OriginalCopy(), ks, self, src, non_blocking);
    return self;
  }
  {
    // The value as a plain tensor: a host copy for a host `self`, the lazy
    // tensor inside for a plain neuron one. The copy is dispatched afresh, so
    // its kernel is chosen by the devices the two tensors are on now.
    at::Tensor source = src;
    if (IsNeuron(self)) {
      at::functionalization::impl::sync(src);
      source = at::functionalization::impl::from_functional_tensor(src);
    } else {
      source = src.to(self.device());
    }
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      self.copy_(source, non_blocking);
    }
  }
  torch::autograd::impl::bump_version(self);
  return self;
}

}  // namespace

namespace {

// A factory (an op with no tensor argument: empty, arange, randperm...) has no
// tensor to carry the Functionalize key, so functionalization never sees it:
// the tracer wraps its result unless Functionalize is excluded, that is, unless
// functionalization's own kernel called it (MakeTensor). Under a Python
// dispatch mode that test fails: the mode's handler runs with every key above
// Python excluded, Functionalize among them, and what it calls (the factory
// itself) comes back unwrapped to a caller above functionalization (AOTAutograd
// runs a graph's first call under such a mode; Dynamo then cannot read the
// tensor). Nor can the tracer tell such a call from a factory made by a kernel
// the handler runs below functionalization (a custom op's Python kernel).
//
// PythonTLSSnapshot is the first key a factory meets while a mode is set, and
// it still sees the caller's dispatch state. Here, for factories, it runs the
// kernel that was there (PyTorch's fallback: keep that state for the handler,
// go on below), then wraps the neuron tensors the call returns unwrapped when
// its caller is above functionalization. Every other result is left as it is:
// a CPU factory, a neuron one called from below functionalization, a fake.
class FactoryUnderMode final : public c10::OperatorKernel {
 public:
  explicit FactoryUnderMode(c10::SafeKernelFunction original) : original_(std::move(original)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const bool above_functionalization =
        !c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Functionalize);
    original_.callBoxed(op, ks, stack);
    if (!above_functionalization) return;
    const size_t num_returns = op.schema().returns().size();
    for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
      c10::IValue& v = (*stack)[i];
      // A tensor of our own, unwrapped; a mode's own tensors (Dynamo's fakes
      // of a neuron device) are the mode's to make.
      if (v.isTensor() && dynamic_cast<NeuronTensorImpl*>(v.toTensor().unsafeGetTensorImpl()) != nullptr) {
        v = at::functionalization::impl::to_functional_tensor(v.toTensor());
      }
    }
  }

 private:
  c10::SafeKernelFunction original_;
};

// An aten op with no tensor argument, a tensor result and a device argument.
bool IsFactory(const c10::FunctionSchema& schema) {
  bool device = false;
  for (const c10::Argument& arg : schema.arguments()) {
    const c10::TypePtr& type = arg.type();
    if (type->isSubtypeOf(*c10::TensorType::get()) || type->isSubtypeOf(*c10::OptionalType::ofTensor()) ||
        type->isSubtypeOf(*c10::ListType::ofTensors()) ||
        type->isSubtypeOf(*c10::ListType::ofOptionalTensors())) {
      return false;
    }
    device |= arg.name() == "device";
  }
  return device && schema.returns().size() == 1 &&
         schema.returns()[0].type()->isSubtypeOf(*c10::TensorType::get());
}

}  // namespace

void RegisterFunctionalizeOverrides() {
  SetFunctionalizeFastPaths(true);
  static bool done = [] {
    SilenceOverrideWarnings silence;
    auto& dispatcher = c10::Dispatcher::singleton();
    OriginalLiftFresh() = dispatcher.findSchemaOrThrow("aten::lift_fresh", "")
                              .getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize);
    OriginalCopy() = dispatcher.findSchemaOrThrow("aten::copy_", "")
                         .getComputedKernelForDispatchKey(c10::DispatchKey::ADInplaceOrView);
    auto* lib =
        new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
    lib->impl("lift_fresh", TORCH_FN(LiftFresh));
    auto* in_place_or_view = new torch::Library(torch::Library::IMPL, "aten",
                                                c10::DispatchKey::ADInplaceOrView, __FILE__, __LINE__);
    in_place_or_view->impl("copy_", TORCH_FN(CopyInPlaceOrView));
    auto* snapshot = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PythonTLSSnapshot,
                                        __FILE__, __LINE__);
    ForEachAtenOp([&](const c10::OperatorHandle& op, const std::string& overload) {
      if (IsFactory(op.schema()) && !op.hasKernelForDispatchKey(c10::DispatchKey::PythonTLSSnapshot)) {
        snapshot->impl(overload.c_str(),
                       torch::CppFunction::makeFromBoxedFunctor(std::make_unique<FactoryUnderMode>(
                           op.getComputedKernelForDispatchKey(c10::DispatchKey::PythonTLSSnapshot))));
      }
    });
    return true;
  }();
  (void)done;
}

}  // namespace torch_neuron::lazy

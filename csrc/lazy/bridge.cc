#include "lazy/bridge.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/lift_fresh.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

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

at::Tensor LiftFresh(c10::DispatchKeySet ks, const at::Tensor& self) {
  if (at::functionalization::impl::isFunctionalTensor(self)) {
    if (IsNeuron(self) && c10::impl::TorchDispatchModeTLS::any_modes_set()) {
      // torch.tensor(data, device="neuron") under a Python dispatch mode:
      // PyTorch made the tensor with the modes off, and lift_fresh is how the
      // modes get to see it (torch.compile's FakeTensorMode turns it into a
      // fake; a CUDA tensor reaches them the same way, being no functional
      // wrapper). Functionalization would keep it from them: pass it below.
      return at::_ops::lift_fresh::redispatch(ks & c10::after_func_keyset, self);
    }
    // A fresh tensor nobody else holds: no alias is needed. Other devices keep
    // PyTorch's view, which graph export relies on.
    return IsNeuron(self) ? self : self.view_as(self);
  }
  at::Tensor out;
  {
    at::AutoDispatchSkipFunctionalize guard;
    out = at::lift_fresh(self);
  }
  return at::functionalization::impl::to_functional_tensor(out);
}

// copy_ at ADInplaceOrView: what PyTorch's kernel there does (run the copy
// below this key, then bump the version of `self`), and one more case.
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
  if (plain_from_functional) {
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
  } else {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::_ops::copy_::redispatch(ks & c10::after_ADInplaceOrView_keyset, self, src, non_blocking);
  }
  torch::autograd::impl::bump_version(self);
  return self;
}

// Swallows the dispatcher's "overriding a previously registered kernel"
// warning for the one registration that means to.
class SilentWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace

void RegisterFunctionalizeOverrides() {
  SetFunctionalizeFastPaths(true);
  static bool done = [] {
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    auto* lib =
        new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
    lib->impl("lift_fresh", TORCH_FN(LiftFresh));
    auto* in_place_or_view = new torch::Library(torch::Library::IMPL, "aten",
                                                c10::DispatchKey::ADInplaceOrView, __FILE__, __LINE__);
    in_place_or_view->impl("copy_", TORCH_FN(CopyInPlaceOrView));
    return true;
  }();
  (void)done;
}

}  // namespace torch_neuron::lazy

#include "lazy/bridge.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

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

at::Tensor MakeWrappedTensor(LazyTensorPtr tensor) {
  at::Tensor inner = at::Tensor(c10::make_intrusive<NeuronTensorImpl>(std::move(tensor)));
  return at::functionalization::impl::to_functional_tensor(inner);
}

at::Tensor MakeTensor(LazyTensorPtr tensor) {
  at::Tensor inner = at::Tensor(c10::make_intrusive<NeuronTensorImpl>(std::move(tensor)));
  const bool below_functionalization =
      c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Functionalize);
  if (below_functionalization) return inner;
  return at::functionalization::impl::to_functional_tensor(inner);
}

}  // namespace torch_neuron::lazy

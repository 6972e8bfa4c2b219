#include "aten/forward_ad.h"

#include <ATen/ATen.h>
#include <ATen/FunctionalTensorWrapper.h>

#include "lazy/bridge.h"

namespace torch_neuron::aten {
namespace {

at::Tensor Unwrapped(const at::Tensor& t) {
  return at::functionalization::impl::isFunctionalTensor(t)
             ? at::functionalization::impl::from_functional_tensor(t)
             : t;
}

c10::SymInt StorageNumel(const at::Tensor& t) { return t.storage().sym_nbytes() / t.itemsize(); }

bool HasSameStorageNumel(const at::Tensor& base, const at::Tensor& other) {
  if (!lazy::IsNeuron(base) && !lazy::IsNeuron(other)) {
    // Functionalization's fallback: the op on the tensors it wraps.
    at::AutoDispatchSkipFunctionalize skip;
    return at::_has_same_storage_numel(Unwrapped(base), Unwrapped(other));
  }
  return StorageNumel(base) == StorageNumel(other);
}

}  // namespace

void RegisterForwardAdKernels(torch::Library& library) {
  library.impl("_has_same_storage_numel", TORCH_FN(HasSameStorageNumel));
}

}  // namespace torch_neuron::aten

// NeuronTensorImpl: the TensorImpl of a neuron tensor below functionalization.
// It has no storage (the data lives in a LazyTensor: an IR value or a device
// buffer) and is always contiguous. Users see it wrapped in PyTorch's
// FunctionalTensorWrapper, which gives views and in-place ops CPU semantics.
#pragma once

#include <c10/core/TensorImpl.h>

#include "lazy/lazy_tensor.h"

namespace torch_neuron::lazy {

class NeuronTensorImpl final : public c10::TensorImpl {
 public:
  explicit NeuronTensorImpl(LazyTensorPtr tensor);

  const LazyTensorPtr& tensor() const { return tensor_; }
  // Re-reads sizes after the LazyTensor changed shape (resize_, out= results).
  void RefreshSizes();

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;

 private:
  LazyTensorPtr tensor_;
};

}  // namespace torch_neuron::lazy

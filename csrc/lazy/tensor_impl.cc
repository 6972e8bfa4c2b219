#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {

NeuronTensorImpl::NeuronTensorImpl(LazyTensorPtr tensor)
    : c10::TensorImpl(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                      c10::scalarTypeToTypeMeta(tensor->shape().dtype()),
                      c10::Device(c10::DeviceType::PrivateUse1,
                                  static_cast<c10::DeviceIndex>(tensor->device()))),
      tensor_(std::move(tensor)) {
  set_storage_access_should_throw();
  RefreshSizes();
}

void NeuronTensorImpl::RefreshSizes() {
  data_type_ = c10::scalarTypeToTypeMeta(tensor_->shape().dtype());
  sizes_and_strides_.set_sizes(tensor_->shape().sizes());
  int64_t stride = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    sizes_and_strides_.stride_at_unchecked(d) = stride;
    stride *= std::max<int64_t>(sizes_and_strides_.size_at_unchecked(d), 1);
  }
  refresh_numel();
  refresh_contiguous();
}

c10::intrusive_ptr<c10::TensorImpl> NeuronTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<NeuronTensorImpl>(tensor_);
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> NeuronTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<NeuronTensorImpl>(tensor_);
  copy_tensor_metadata(this, impl.get(), std::move(version_counter),
                       allow_tensor_metadata_change);
  return impl;
}

void NeuronTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<NeuronTensorImpl*>(impl.get());
  TORCH_INTERNAL_ASSERT(other != nullptr, "shallow_copy_from a non-neuron tensor");
  copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
  tensor_ = other->tensor_;
}

}  // namespace torch_neuron::lazy

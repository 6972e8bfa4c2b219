#include "lazy/tensor_impl.h"

#include <algorithm>

namespace torch_neuron::lazy {

c10::SmallVector<int64_t, 5> ContiguousStrides(c10::IntArrayRef sizes) {
  c10::SmallVector<int64_t, 5> strides(sizes.size());
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

TensorLayout TensorLayout::Of(const at::TensorBase& t) {
  // Sparse and other non-strided layouts have no strides to keep (neuron
  // refuses them by name where they are made).
  if (t.layout() != c10::kStrided) return {};
  return From(t.sizes(), t.strides(), t.storage_offset());
}

TensorLayout TensorLayout::From(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t storage_offset) {
  TensorLayout layout;
  layout.storage_offset = storage_offset;
  if (!HasContiguousStrides(sizes, strides)) layout.strides.assign(strides.begin(), strides.end());
  return layout;
}

NeuronTensorImpl::NeuronTensorImpl(LazyTensorPtr tensor, const TensorLayout& layout)
    : c10::TensorImpl(
          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
          c10::scalarTypeToTypeMeta(tensor->shape().dtype()),
          c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(tensor->device()))),
      tensor_(std::move(tensor)) {
  set_storage_access_should_throw();
  RefreshSizes(layout);
}

void NeuronTensorImpl::RefreshSizes(const TensorLayout& layout) {
  data_type_ = c10::scalarTypeToTypeMeta(tensor_->shape().dtype());
  c10::IntArrayRef sizes = tensor_->shape().sizes();
  const bool fits = layout.strides.empty() || layout.strides.size() == sizes.size();
  const c10::SmallVector<int64_t, 5> strides =
      fits && !layout.strides.empty() ? layout.strides : ContiguousStrides(sizes);
  sizes_and_strides_.set_sizes(sizes);
  for (size_t d = 0; d < sizes.size(); ++d) sizes_and_strides_.stride_at_unchecked(d) = strides[d];
  storage_offset_ = fits ? layout.storage_offset : 0;
  refresh_numel();
  refresh_contiguous();
}

void NeuronTensorImpl::SetInference(bool inference) {
  if (inference == is_inference()) return;
  if (inference) {
    key_set_ = key_set_ - c10::autograd_dispatch_keyset_with_ADInplaceOrView;
    version_counter_ = c10::VariableVersion(c10::VariableVersion::DISABLED);
  } else {
    key_set_ = key_set_ | c10::getAutogradRelatedKeySetFromBackend(c10::BackendComponent::PrivateUse1Bit);
    version_counter_ = c10::VariableVersion(/*version=*/0);
  }
}

TensorLayout NeuronTensorImpl::layout() const {
  return TensorLayout::From(sizes_and_strides_.sizes_arrayref(), sizes_and_strides_.strides_arrayref(),
                            storage_offset_);
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
  copy_tensor_metadata(this, impl.get(), std::move(version_counter), allow_tensor_metadata_change);
  return impl;
}

void NeuronTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<NeuronTensorImpl*>(impl.get());
  TORCH_INTERNAL_ASSERT(other != nullptr, "shallow_copy_from a non-neuron tensor");
  copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
  tensor_ = other->tensor_;
}

}  // namespace torch_neuron::lazy

// NeuronTensorImpl: the TensorImpl of a neuron tensor below functionalization.
// It has no storage: the data lives in a LazyTensor (an IR value or a device
// buffer), always dense in logical (row-major) order. What it reports as its
// strides and storage offset is its layout: the metadata the CPU would give
// the same tensor (a view's strides into its base, channels_last results),
// worked out by the ops' Meta kernels. Users see it wrapped in PyTorch's
// FunctionalTensorWrapper, which mirrors that metadata and gives views and
// in-place ops CPU semantics.
#pragma once

#include <ATen/core/TensorBase.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

#include "lazy/lazy_tensor.h"

namespace torch_neuron::lazy {

// Reported strides and storage offset of a tensor. Empty strides: the
// contiguous strides of its sizes.
struct TensorLayout {
  c10::SmallVector<int64_t, 5> strides;
  int64_t storage_offset = 0;

  bool is_default() const { return strides.empty() && storage_offset == 0; }
  // The layout of `t` (meta or CPU), empty where it is plain contiguous.
  static TensorLayout Of(const at::TensorBase& t);
  // The layout of these strides and offset over `sizes`: no strides where they
  // are the contiguous ones.
  static TensorLayout From(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t storage_offset);
  friend bool operator==(const TensorLayout& a, const TensorLayout& b) {
    return a.strides == b.strides && a.storage_offset == b.storage_offset;
  }
};

// The contiguous strides of `sizes` (as PyTorch computes them: a size-0 or
// size-1 dimension counts as 1).
c10::SmallVector<int64_t, 5> ContiguousStrides(c10::IntArrayRef sizes);
// strides == ContiguousStrides(sizes), without building the array (every
// traced operand asks, through TensorLayout::Of).
inline bool HasContiguousStrides(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  if (strides.size() != sizes.size()) return false;
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (strides[d] != expected) return false;
    expected *= sizes[d] > 1 ? sizes[d] : 1;
  }
  return true;
}

class NeuronTensorImpl final : public c10::TensorImpl {
 public:
  explicit NeuronTensorImpl(LazyTensorPtr tensor, const TensorLayout& layout = {});

  const LazyTensorPtr& tensor() const { return tensor_; }
  // Re-reads sizes after the LazyTensor changed shape (resize_, out= results)
  // and takes `layout` (which must fit the sizes; a default one otherwise).
  void RefreshSizes(const TensorLayout& layout = {});
  TensorLayout layout() const;
  // Makes this an inference tensor or a normal one (its autograd keys and
  // version counter); a new tensor is what the mode in force makes
  // (bridge.h, MakeViewTensor, says where that is changed).
  void SetInference(bool inference);

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;

 private:
  LazyTensorPtr tensor_;
};

}  // namespace torch_neuron::lazy

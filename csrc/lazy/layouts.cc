#include "lazy/layouts.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/Contiguity.h>
#include <ATen/ops/as_strided_copy.h>
#include <ATen/ops/as_strided_scatter.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/view_copy.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_join.h"
#include "lazy/bridge.h"

namespace torch_neuron::lazy {
namespace {

// Calls `visit(address)` for every element of the strided footprint.
template <typename Visit>
void ForEachAddress(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset, Visit visit) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (numel == 0) return;
  std::vector<int64_t> index(sizes.size(), 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t address = offset;
    for (size_t d = 0; d < sizes.size(); ++d) address += index[d] * strides[d];
    visit(address);
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
}

// Whether every storage element the request reaches is one of the input's.
bool Covers(c10::IntArrayRef in_sizes, c10::IntArrayRef in_strides, int64_t in_offset, c10::IntArrayRef sizes,
            c10::IntArrayRef strides, int64_t offset) {
  const int64_t begin = std::min(in_offset, offset);
  const int64_t end =
      std::max(StorageExtent(in_sizes, in_strides, in_offset), StorageExtent(sizes, strides, offset));
  std::vector<bool> held(static_cast<size_t>(end - begin), false);
  ForEachAddress(in_sizes, in_strides, in_offset, [&](int64_t a) { held[a - begin] = true; });
  bool covered = true;
  ForEachAddress(sizes, strides, offset, [&](int64_t a) { covered = covered && held[a - begin]; });
  return covered;
}

std::string Dims(c10::IntArrayRef v) { return "[" + absl::StrJoin(v, ", ") + "]"; }

}  // namespace

int64_t StorageExtent(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  int64_t last = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return offset;
    last += (sizes[d] - 1) * strides[d];
  }
  return last + 1;
}

at::Tensor MetaTensor(const ir::Shape& shape, const TensorLayout& layout) {
  const at::TensorOptions options = at::TensorOptions().dtype(shape.dtype()).device(at::kMeta);
  if (layout.is_default()) return at::empty(shape.sizes(), options);
  const c10::SmallVector<int64_t, 5> strides =
      layout.strides.empty() ? ContiguousStrides(shape.sizes()) : layout.strides;
  const int64_t extent = StorageExtent(shape.sizes(), strides, layout.storage_offset);
  return at::empty({extent}, options).as_strided(shape.sizes(), strides, layout.storage_offset);
}

TensorLayout CloneLayout(const at::Tensor& input, const c10::IValue& memory_format) {
  const std::optional<c10::MemoryFormat> format = memory_format.toOptional<c10::MemoryFormat>();
  if (format == c10::MemoryFormat::Contiguous) return {};
  const TensorLayout layout = TensorLayout::Of(input);
  if (!format || *format == c10::MemoryFormat::Preserve) {
    // empty_like's rule for preserve_format, as the CPU's clone applies it:
    // the input's strides where they are non-overlapping and dense, else
    // dense strides in the order of the input's. Computed here: the Meta
    // empty_like is PyTorch's Python reference, whose call cost 40 us per
    // traced clone of a transposed tensor (attention's, every step).
    TensorLayout result;  // storage offset 0
    if (c10::_compute_non_overlapping_and_dense(input.sizes(), input.strides())) {
      result.strides = layout.strides;
    } else {
      const std::vector<int64_t> dense = at::infer_dense_strides(input.sizes(), input.strides());
      if (!HasContiguousStrides(input.sizes(), dense)) {
        result.strides.assign(dense.begin(), dense.end());
      }
    }
    return result;
  }
  at::Tensor meta = MetaTensor(ir::Shape(input.scalar_type(), input.sizes().vec()), layout);
  return TensorLayout::Of(at::empty_like(meta, at::TensorOptions(), format));
}

void TraceAddressingStorage(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string& name = op.schema().name();
  const size_t num_args = op.schema().arguments().size();
  const size_t base = stack->size() - num_args;
  const at::Tensor self = (*stack)[base].toTensor();
  const TensorLayout layout = TensorLayout::Of(self);
  const std::vector<int64_t> sizes = (*stack)[base + 1].toIntVector();
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  at::Tensor result;
  if (name == "aten::_reshape_alias_copy" || name == "aten::_reshape_alias") {
    // Only ever asked for where a view of these sizes exists: the view's
    // elements, in order, are the reshape's.
    result = at::view_copy(self, sizes);
  } else {
    const std::vector<int64_t> strides = (*stack)[base + 2].toIntVector();
    const int64_t offset = (*stack)[base + 3].toOptional<int64_t>().value_or(layout.storage_offset);
    const c10::SmallVector<int64_t, 5> in_strides =
        layout.strides.empty() ? ContiguousStrides(self.sizes()) : layout.strides;
    TORCH_CHECK_NOT_IMPLEMENTED(
        Covers(self.sizes(), in_strides, layout.storage_offset, sizes, strides, offset),
        "as_strided(size=", Dims(sizes), ", stride=", Dims(strides), ", storage_offset=", offset,
        ") of a neuron tensor of size ", Dims(self.sizes()), ", stride ", Dims(in_strides),
        " and storage offset ", layout.storage_offset,
        " reaches storage outside that tensor's own elements, which the neuron device does not "
        "keep; take the view of its base tensor instead");
    // The same value, reporting the default layout: the rewritten call must
    // not come back here.
    const at::Tensor dense = MakeTensor(GetLazy(self));
    if (layout.strides.empty()) {
      result = at::as_strided_copy(dense, sizes, strides, offset - layout.storage_offset);
    } else {
      // The input's elements placed in an image of its storage, read as asked.
      const int64_t extent = StorageExtent(self.sizes(), in_strides, layout.storage_offset);
      at::Tensor image = at::zeros({extent}, self.options());
      image = at::as_strided_scatter(image, dense, self.sizes(), in_strides, layout.storage_offset);
      result = at::as_strided_copy(image, sizes, strides, offset);
    }
    GetImpl(result)->RefreshSizes(TensorLayout::From(sizes, strides, offset));
  }
  torch::jit::drop(*stack, num_args);
  stack->push_back(result);
}

bool RestrideMetadataOnlyTensor(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t base) {
  at::Tensor self = (*stack)[base].toTensor();
  if (TryGetLazy(self) != nullptr) return false;
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  const size_t num_args = op.schema().arguments().size();
  if (op.schema().name() == "aten::as_strided_") {
    // The arguments are the result's geometry itself.
    const std::vector<c10::SymInt> sizes = (*stack)[base + 1].toSymIntVector();
    const std::vector<c10::SymInt> strides = (*stack)[base + 2].toSymIntVector();
    const c10::IValue& offset = (*stack)[base + 3];
    impl->set_sizes_and_strides(sizes, strides,
                                offset.isNone() ? impl->sym_storage_offset() : offset.toSymInt());
  } else {
    // The others move within the tensor's own elements: their Meta kernel,
    // run on a meta tensor of the same geometry at offset 0, gives the new
    // geometry and the offset to add.
    at::Tensor meta =
        at::empty_strided_symint(self.sym_sizes(), self.sym_strides(), self.options().device(c10::kMeta));
    torch::jit::Stack meta_stack(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
    meta_stack[0] = meta;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
    impl->set_sizes_and_strides(meta.sym_sizes(), meta.sym_strides(),
                                impl->sym_storage_offset() + meta.sym_storage_offset());
  }
  torch::jit::drop(*stack, num_args);
  stack->push_back(std::move(self));
  return true;
}

}  // namespace torch_neuron::lazy

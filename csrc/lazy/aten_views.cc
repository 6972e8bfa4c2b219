// View and metadata kernels of the neuron device. Views alias the base tensor's
// device memory exactly as on CPU (same storage, new sizes/strides/offset), so
// these reuse ATen's device-generic implementations; none of them moves data.
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "runtime/neuron_allocator.h"

namespace torch_neuron::lazy {
namespace {

at::Tensor AsStrided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                     std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

const at::Tensor& Resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  // The CPU implementation only touches the storage through its allocator,
  // which for a neuron tensor is the neuron allocator.
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& SetStorageOffset(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                             c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& SetStorage(at::Tensor& self, c10::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return SetStorageOffset(self, std::move(source), 0, {elements}, {});
}

at::Tensor& SetTensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return SetStorageOffset(self, source.storage(), source.storage_offset(), source.sizes(),
                          source.strides());
}

at::Tensor& SetEmpty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, runtime::GetNeuronAllocator(),
                     /*resizable=*/true);
  return SetStorageOffset(self, std::move(empty), 0, {0}, {});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("as_strided", AsStrided);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("resize_", Resize);
  m.impl("set_.source_Storage_storage_offset", SetStorageOffset);
  m.impl("set_.source_Storage", SetStorage);
  m.impl("set_.source_Tensor", SetTensor);
  m.impl("set_", SetEmpty);
}

}  // namespace torch_neuron::lazy

// Factory kernels of the neuron device: empty and empty_strided allocate in the
// device arena. Every other factory (zeros, ones, full, arange, rand*) is built by
// ATen from these plus a fill or random kernel.
#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "runtime/dtypes.h"
#include "runtime/neuron_allocator.h"

namespace torch_neuron::lazy {
namespace {

const c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);

void CheckOptions(std::optional<c10::Layout> layout, std::optional<bool> pin_memory,
                  c10::ScalarType dtype) {
  TORCH_CHECK(!layout.has_value() || *layout == c10::kStrided,
              "neuron devices only hold strided tensors, got layout ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned, not neuron tensors");
  runtime::CheckSupportedDtype(dtype);
}

at::Tensor Empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                 std::optional<bool> pin_memory,
                 std::optional<c10::MemoryFormat> memory_format) {
  const c10::ScalarType type = dtype.value_or(c10::get_default_dtype_as_scalartype());
  CheckOptions(layout, pin_memory, type);
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, runtime::GetNeuronAllocator(), kNeuronKeys, type,
                                   memory_format);
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                        std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::ScalarType type = dtype.value_or(c10::get_default_dtype_as_scalartype());
  CheckOptions(layout, pin_memory, type);
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, runtime::GetNeuronAllocator(),
                                           kNeuronKeys, type);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", Empty);
  m.impl("empty_strided", EmptyStrided);
}

}  // namespace torch_neuron::lazy

// Layouts: the strides and storage offsets neuron tensors report (see
// tensor_impl.h). The device keeps every tensor dense in logical order; the
// tracer works out what the CPU would report from the ops' Meta kernels, run on
// meta tensors laid out as the inputs report. The few ops whose arguments
// address a tensor's storage rather than its elements (as_strided's strides and
// offset, _reshape_alias's strides) are rewritten here onto the dense data.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>

#include "ir/shape.h"
#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {

// One past the highest storage element a tensor of `sizes`, `strides` and
// `offset` reaches (`offset` for an empty one).
int64_t StorageExtent(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset);

// A meta tensor of `shape` laid out as `layout` (over a storage just large
// enough for it).
at::Tensor MetaTensor(const ir::Shape& shape, const TensorLayout& layout);

// The layout of clone(input, memory_format): empty_like's rules (preserve
// keeps a dense input's strides, otherwise the suggested format).
TensorLayout CloneLayout(const at::Tensor& input, const c10::IValue& memory_format);

// Traces an op whose arguments address its first tensor's storage
// (ir::OpTraits::addresses_storage) (its first tensor reporting a layout other than the
// default) as the same op on the dense data, reporting the CPU's layout. The
// view forms (as_strided, _reshape_alias) come here from composite kernels run
// below functionalization, and are traced as the copying forms: nothing below
// functionalization aliases.
// as_strided of a view that reaches storage outside the view's own elements
// raises NotImplementedError: the device does not keep them.
void TraceAddressingStorage(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// An inplace_view op (as_strided_, transpose_) on a neuron tensor that is not a
// LazyTensor: a Python wrapper subclass reaching the device key with Python's
// keys excluded, as torch.compile's FunctionalTensorMode does when it replays a
// metadata mutation on its wrapper (a channels_last adaptive_avg_pool2d's
// as_strided_). Such a tensor has no device data, only metadata, so the op
// sets its sizes, strides and offset to those the op's Meta kernel gives, as
// the CPU's and CUDA's composite kernels do for theirs. False (stack
// untouched) when the first argument is a LazyTensor.
bool RestrideMetadataOnlyTensor(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t base);

}  // namespace torch_neuron::lazy

// Kernels that move data across the device boundary or read it, for neuron
// tensors (PrivateUse1; registered in aten/registration.cc): copy (the
// functional form of copy_), _to_copy (.to(), .cpu()), _copy_from (copies into
// CPU tensors), _local_scalar_dense (.item(), bool(), printing) and resize_.
// Everything else is traced (tracer.cc).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/MemoryFormat.h>
#include <torch/library.h>

#include <optional>

namespace torch_neuron::lazy {

// aten::copy, aten::_to_copy and aten::copy_ (boxed).
void CopyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void ToCopyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void InPlaceCopyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// _to_copy's kernel at Functionalize: a neuron tensor's copy comes back wrapped
// (ToCopyKernel returns the traced tensor itself); every other call runs the
// kernel that was there.
void RegisterToCopyFunctionalize(torch::Library& library);

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst);
at::Scalar LocalScalarDense(const at::Tensor& self);
const at::Tensor& Resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format);

}  // namespace torch_neuron::lazy

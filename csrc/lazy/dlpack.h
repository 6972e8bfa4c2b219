// DLPack export and import of neuron tensors, as PyTorch maps its PrivateUse1
// device (aten/src/ATen/DLConvertor.cpp): device type kDLExtDev, device id the
// neuron index.
//
// Exporting syncs the tensor: its pending graph runs and the export waits for
// the value (as CUDA's __dlpack__ makes the consumer's stream wait for the
// producer's), so the capsule's data is the address of the tensor's device
// buffer, which is host memory of the emulated device's arena, holding the
// tensor's elements contiguously in its logical order (the capsule's strides
// say so). The capsule keeps that buffer alive. A neuron buffer is never
// written in place (functionalization gives every write a new value), so a
// foreign reader sees the values at the export.
//
// Importing a capsule made here gives back a neuron tensor aliasing the one
// exported (a view of it: the same storage, data_ptr and values, and writes
// through either reach the other), as PyTorch's import of a CUDA capsule
// shares the CUDA tensor's memory. A kDLExtDev capsule made by anyone else is
// refused: device memory comes only from neuron's own allocations.
//
// Thread-safe: the functions hold no state of their own.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/dlpack.h>

#include <optional>

namespace torch_neuron::lazy {

// A capsule's payload for the neuron tensor `t` (synced first). The caller owns
// it and calls its deleter, unless a consumer takes it.
DLManagedTensor* ToDLPack(const at::Tensor& t);
DLManagedTensorVersioned* ToDLPackVersioned(const at::Tensor& t);

// The neuron tensor a capsule's payload made by ToDLPack(Versioned) stands
// for, as a new view of it (the payload itself is left to the caller); nullopt
// for a payload of any other device. Raises for a kDLExtDev payload not made
// here.
std::optional<at::Tensor> FromDLPack(const DLManagedTensor* managed);
std::optional<at::Tensor> FromDLPackVersioned(const DLManagedTensorVersioned* managed);

}  // namespace torch_neuron::lazy

// torch.autocast("neuron"): the AutocastPrivateUse1 kernels (autocast.cc),
// registered in registration.cc.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <optional>

namespace torch_neuron::aten {

// Registers in `m` (aten, AutocastPrivateUse1) the autocast kernel of every op
// in the lists PyTorch keeps for backends to share (ATen/autocast_mode.h: the
// lists CUDA uses): matmuls and convolutions in the autocast dtype, reductions,
// norms, losses and overflow-prone pointwise ops in float32, ops of several
// inputs in their widest input type.
void RegisterAutocastLists(torch::Library& m);

// binary_cross_entropy under autocast: refused, as under CUDA's (its log
// saturates in float16); the message points to the safe form.
at::Tensor BinaryCrossEntropyRefused(const at::Tensor& self, const at::Tensor& target,
                                     const std::optional<at::Tensor>& weight, int64_t reduction);

}  // namespace torch_neuron::aten

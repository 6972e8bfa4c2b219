// Kernels of neuron tensors that are compositions of other ATen ops, registered
// on AutogradPrivateUse1 (registration.cc): autograd differentiates the ops
// they call, and they act on neuron tensors only.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>
#include <vector>

namespace torch_neuron::aten {

// ATen's recurrent layers hand each step's gates to a fused cell on every
// device but the CPU; those ops have CUDA kernels only. These spell the cells
// in pointwise ops, as the CUDA kernels compute them. The last result is the
// CUDA kernels' workspace (read only by their backward ops, never needed
// here): the activated gates for LSTM; the gates, hx and the hidden new gate
// for GRU.
std::tuple<at::Tensor, at::Tensor, at::Tensor> FusedLstmCell(const at::Tensor& input_gates,
                                                             const at::Tensor& hidden_gates,
                                                             const at::Tensor& cx,
                                                             const std::optional<at::Tensor>& input_bias,
                                                             const std::optional<at::Tensor>& hidden_bias);
std::tuple<at::Tensor, at::Tensor> FusedGruCell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                const at::Tensor& hx,
                                                const std::optional<at::Tensor>& input_bias,
                                                const std::optional<at::Tensor>& hidden_bias);

// ctc_loss with its length tensors on the CPU, as CUDA takes them (speech
// recipes keep them there): their values become lists, as ATen does for
// plain tensors (it keeps the tensors for a wrapper subclass such as ours,
// then mixes devices); lengths on neuron take ATen's composite, a CPU length
// beside a neuron one moves to neuron first.
at::Tensor CtcLoss(const at::Tensor& log_probs, const at::Tensor& targets, const at::Tensor& input_lengths,
                   const at::Tensor& target_lengths, int64_t blank, int64_t reduction, bool zero_infinity);

// _foreach_addcdiv/_foreach_addcmul (and their in-place forms) with the
// scalars packed in a CPU tensor: the CPU's checks, then its list overload.
std::vector<at::Tensor> ForeachAddcdivScalarTensor(at::TensorList self, at::TensorList tensor1,
                                                   at::TensorList tensor2, const at::Tensor& scalars);
std::vector<at::Tensor> ForeachAddcmulScalarTensor(at::TensorList self, at::TensorList tensor1,
                                                   at::TensorList tensor2, const at::Tensor& scalars);
void ForeachAddcdivScalarTensor_(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                                 const at::Tensor& scalars);
void ForeachAddcmulScalarTensor_(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                                 const at::Tensor& scalars);

}  // namespace torch_neuron::aten

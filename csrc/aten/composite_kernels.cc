#include "aten/composite_kernels.h"

#include <ATen/ATen.h>
#include <ATen/native/ForeachUtils.h>
#include <ATen/ops/ctc_loss_native.h>

namespace torch_neuron::aten {
namespace {

at::Tensor WithBias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

std::vector<int64_t> Values(const at::Tensor& lengths) {
  const at::Tensor values = lengths.to(at::kLong).contiguous();
  const int64_t* data = values.const_data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + values.numel());
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> FusedLstmCell(const at::Tensor& input_gates,
                                                             const at::Tensor& hidden_gates,
                                                             const at::Tensor& cx,
                                                             const std::optional<at::Tensor>& input_bias,
                                                             const std::optional<at::Tensor>& hidden_bias) {
  const at::Tensor gates = WithBias(WithBias(input_gates + hidden_gates, input_bias), hidden_bias);
  const std::vector<at::Tensor> chunks = gates.chunk(4, 1);
  const at::Tensor in = chunks[0].sigmoid();
  const at::Tensor forget = chunks[1].sigmoid();
  const at::Tensor cell = chunks[2].tanh();
  const at::Tensor out = chunks[3].sigmoid();
  at::Tensor cy = forget * cx + in * cell;
  at::Tensor hy = out * cy.tanh();
  return {std::move(hy), std::move(cy), at::cat({in, forget, cell, out}, 1)};
}

std::tuple<at::Tensor, at::Tensor> FusedGruCell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                const at::Tensor& hx,
                                                const std::optional<at::Tensor>& input_bias,
                                                const std::optional<at::Tensor>& hidden_bias) {
  const std::vector<at::Tensor> in = WithBias(input_gates, input_bias).chunk(3, 1);
  const std::vector<at::Tensor> hidden = WithBias(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor reset = (in[0] + hidden[0]).sigmoid();
  const at::Tensor update = (in[1] + hidden[1]).sigmoid();
  const at::Tensor candidate = (in[2] + reset * hidden[2]).tanh();
  at::Tensor hy = candidate + update * (hx - candidate);
  return {std::move(hy), at::cat({reset, update, candidate, hx, hidden[2]}, 1)};
}

at::Tensor CtcLoss(const at::Tensor& log_probs, const at::Tensor& targets, const at::Tensor& input_lengths,
                   const at::Tensor& target_lengths, int64_t blank, int64_t reduction, bool zero_infinity) {
  // The CPU's checks, with its messages.
  TORCH_CHECK(at::isIntegralType(input_lengths.scalar_type(), /*includeBool=*/false),
              "input_lengths must be integral");
  TORCH_CHECK(at::isIntegralType(target_lengths.scalar_type(), /*includeBool=*/false),
              "target_lengths must be integral");
  if (input_lengths.device().is_cpu() && target_lengths.device().is_cpu()) {
    return at::ctc_loss(log_probs, targets, Values(input_lengths), Values(target_lengths), blank, reduction,
                        zero_infinity);
  }
  return at::native::ctc_loss(log_probs, targets, input_lengths.to(log_probs.device()),
                              target_lengths.to(log_probs.device()), blank, reduction, zero_infinity);
}

std::vector<at::Tensor> ForeachAddcdivScalarTensor(at::TensorList self, at::TensorList tensor1,
                                                   at::TensorList tensor2, const at::Tensor& scalars) {
  return at::_foreach_addcdiv(self, tensor1, tensor2,
                              at::native::convert_tensor_to_scalar_list(scalars, self.size()));
}

std::vector<at::Tensor> ForeachAddcmulScalarTensor(at::TensorList self, at::TensorList tensor1,
                                                   at::TensorList tensor2, const at::Tensor& scalars) {
  return at::_foreach_addcmul(self, tensor1, tensor2,
                              at::native::convert_tensor_to_scalar_list(scalars, self.size()));
}

void ForeachAddcdivScalarTensor_(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                                 const at::Tensor& scalars) {
  at::_foreach_addcdiv_(self, tensor1, tensor2,
                        at::native::convert_tensor_to_scalar_list(scalars, self.size()));
}

void ForeachAddcmulScalarTensor_(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                                 const at::Tensor& scalars) {
  at::_foreach_addcmul_(self, tensor1, tensor2,
                        at::native::convert_tensor_to_scalar_list(scalars, self.size()));
}

}  // namespace torch_neuron::aten

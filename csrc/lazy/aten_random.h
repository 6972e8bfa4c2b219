// Random kernels that PyTorch gives no Generator argument, rewritten from ops
// that take the neuron generator (aten_random.cc; registered in
// aten/registration.cc).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_neuron::lazy {

// aten::native_dropout: a Bernoulli mask drawn in trace order from the device
// stream, then input * mask * 1/(1-p), as the CPU kernel computes it.
std::tuple<at::Tensor, at::Tensor> NativeDropout(const at::Tensor& input, double p,
                                                 std::optional<bool> train);

}  // namespace torch_neuron::lazy

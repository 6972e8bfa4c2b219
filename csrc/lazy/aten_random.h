// Random kernels that PyTorch gives no Generator argument, rewritten from ops
// that take the neuron generator (aten_random.cc; registered in
// aten/registration.cc).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <tuple>

namespace torch_neuron::lazy {

// aten::native_dropout: a Bernoulli mask drawn in trace order from the device
// stream, then input * mask * 1/(1-p), as the CPU kernel computes it.
std::tuple<at::Tensor, at::Tensor> NativeDropout(const at::Tensor& input, double p,
                                                 std::optional<bool> train);

// aten::normal with a tensor std (its functional and out= overloads): the CPU
// kernel refuses a negative element before it draws, in its words; here that
// check reads std's values at the call, as CUDA's kernel does (a sync), then
// the op is traced. Accepted, the bad draw failed at a later sync, in another
// line (another test, in PyTorch's suite).
void NormalWithStdTensor(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuron::lazy

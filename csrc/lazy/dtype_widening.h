// Ops whose CPU kernels lack dtypes an accelerator's kernels take, traced on a
// wider dtype the CPU kernel takes (dtype_widening.cc; registered in
// aten/registration.cc).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_neuron::lazy {

// histc of an integral (or bool) tensor, as CUDA computes it (boxed).
void HistcOfIntegers(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuron::lazy

// Ops traced on another dtype than the one they are given: where the CPU
// kernels lack dtypes an accelerator's kernels take, a wider dtype the CPU
// kernel takes; where the CPU's kernel converts an argument's dtype itself, that
// dtype (dtype_widening.cc; registered in aten/registration.cc).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_neuron::lazy {

// histc of an integral (or bool) tensor, as CUDA computes it (boxed).
void HistcOfIntegers(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// index_put (and _index_put_impl, in place or not) with uint8 masks among its
// indices: the CPU's deprecation warning at the call, one per uint8 mask as
// the CPU's kernel gives it, and the op traced with the bool masks that kernel
// reads them as, so the warning is not raised again where the graph runs
// (boxed).
void IndexPutOfByteMasks(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuron::lazy

// The CPU's memory-overlap checks of a written tensor against the op's other
// tensor arguments, made before the op computes.
//
// Functionalization computes an in-place or out= op from the values before the
// write, so a written tensor that overlaps an argument gives a result where
// the CPU refuses the call ("some elements of the input tensor and the
// written-to tensor refer to a single memory location"). The CPU's rules, by
// kernel family:
//  - elementwise kernels (TensorIterator: ops tagged pointwise, where, cumsum)
//    refuse a partial overlap; the same tensor in and out is fine;
//  - kernels that index, gather or concatenate (scatter*, index_put_,
//    index_copy_, index_add_, index_reduce_, put_; the out= forms of cat,
//    gather, index_select, take) refuse any overlap.
// Other ops (reductions, masked_fill_, index_fill_ ...) are left alone, as on
// the CPU. Argument-only: it reads no values, so it runs at the call.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_neuron::lazy {

// Whether `op` has one of the rules above.
bool HasOverlapRule(const c10::OperatorHandle& op);

// Checks `written` (an argument of `op` on `stack`, whose arguments start at
// `base`) against every other tensor argument, by the rules above; raises the
// CPU's error.
void CheckWrittenOverlap(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
                         const at::Tensor& written);

}  // namespace torch_neuron::lazy

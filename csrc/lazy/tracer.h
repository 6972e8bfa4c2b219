// The tracer: one boxed kernel that records any ATen op on neuron tensors as an
// IR node instead of running it. Output dtypes and sizes come from the op's Meta
// kernel (cached per op, input metadata and arguments). Ops whose results cannot
// be known without the data (data-dependent shapes, non-tensor results, no Meta
// kernel) run through the CPU fallback instead.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_neuron::lazy {

// The PrivateUse1 fallback kernel: traces the op on `stack`.
void TraceOp(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A backend fallback only runs for ops without a kernel for the backend, and
// many functional ops have device-generic composite kernels: structured ops
// (add.Tensor, view_copy...) a CompositeExplicitAutogradNonFunctional one that
// decomposes them into empty + out= calls, others (clone, zeros, full...) a
// CompositeExplicitAutograd one that fills fresh tensors in place. Registers
// TraceOp for every aten op with such a kernel on PrivateUse1 (in-place and
// out= ops included, for code running below functionalization), so they trace
// as themselves. Idempotent; returns the number of ops registered.
int RegisterTracerForCompositeOps();

}  // namespace torch_neuron::lazy

// The tracer: one boxed kernel that records any ATen op on neuron tensors as an
// IR node instead of running it. Output dtypes and sizes come from the op's Meta
// kernel (cached per op, input metadata and arguments). Ops whose results cannot
// be known without the data (data-dependent shapes, non-tensor results, no Meta
// kernel) run through the CPU fallback instead.
//
// TraceOp runs named stages (tracer.cc): shortcuts (identities, constant
// factories' fills, storage-addressing views), the device, binding the
// arguments (argument_binder.h: operands, attributes, the Meta stack and cache key), Meta
// inference (meta_inference.h, fixups in cpu_parity_rules.h), writes (in-place and
// out= arguments), emitting the node, binding the results; then the
// TraceObserver list and the Scheduler. What it knows of each op is in
// trace_info.h; which ops reach it, in tracer_registration.cc.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_neuron::lazy {

// The PrivateUse1 fallback kernel: traces the op on `stack`.
void TraceOp(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// While a size-generic trace is on (this thread; dynamo/compiled_graph.h),
// and in lazy mode with TORCH_NEURON_DYNAMIC_SHAPES, every SymInt argument of
// a traced op (a size, a view's sizes and strides, a slice's bounds) is bound
// as a position, a parameter whatever its value (TraceInfo::symint_args), so
// that the graph's hash and program hold no size (ir/graph.h,
// CanonicalGraph::size_generic). Returns the previous setting.
bool SetSizeGenericTrace(bool on);
bool SizeGenericTrace();

// A backend fallback only runs for ops without a kernel for the backend, and
// many functional ops have device-generic composite kernels: structured ops
// (add.Tensor, view_copy...) a CompositeExplicitAutogradNonFunctional one that
// decomposes them into empty + out= calls, others (clone, zeros, full...) a
// CompositeExplicitAutograd one that fills fresh tensors in place. Registers
// TraceOp for every aten op with such a kernel on PrivateUse1 (in-place and
// out= ops included, for code running below functionalization), so they trace
// as themselves. Idempotent; returns the number of ops registered.
int RegisterTracerForCompositeOps();

// Backend fallbacks of the quantized and sparse neuron keys: a TypeError naming
// the unsupported dtype, and a NotImplementedError naming the sparse layout.
void RejectQuantized(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void RejectSparse(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuron::lazy

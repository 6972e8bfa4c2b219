// The CPU's errors at the call, for neuron calls: one component.
//
// A neuron op is traced, not run: its output's shape comes from the op's Meta
// kernel, and its values come much later, when the graph runs. PyTorch's Meta
// kernels miss many of the CPU kernels' checks (torch._refs' in-place ops
// accept a broadcast of self and writes into overlapping memory, out= ops cast
// where the CPU refuses, random ops take any parameters, add takes a float
// alpha for integers...), so bad input would be accepted at the call and fail
// at a later sync, in unrelated code. The component raises the CPU's error
// with the CPU's words. Its parts:
//  - the rules, each stated once (cpu_parity_rules.h): overlap (internal, and
//    of a written tensor with the other arguments), the broadcast of an
//    in-place op's operands to self's shape, the cast of a result into the
//    written dtype, the out= rules, the Meta fix-ups of output shapes;
//  - checks the CPU kernels make by name (cpu_kernel_checks.h);
//  - probes: where a check depends on dtypes and parameters in ways a table
//    would only copy, the same call on one-element CPU tensors raises the
//    CPU's error (and warns its warnings), once per signature;
//  - the kernels that call them: neuron's Meta kernels here (in-place ops,
//    out= ops, probed ops; a CPU-accepted out dtype that a Meta kernel wants
//    exact is given the CPU's answer) and the foreach ones (foreach_meta.cc),
//    the out= kernels (out_checks.h), the in-place Functionalize kernels
//    (neuron_inplace.h).
// Neuron's Meta kernels (neuron_meta.h) run where neuron runs a Meta kernel
// for itself (the tracer's shape inference, the out= checks, functionalization's
// run of an in-place op), never on the Meta dispatch key, so meta tensors and
// the fake tensors of every other device keep PyTorch's own kernels (issue
// 48). The per-op choices are op traits (ir/op_traits.h) and schema facts.
//
// A call whose op signature (op_signature.h: the tracer's Meta-cache key,
// computed over the call's meta copies, with integers' values) passed the
// checks of a pointwise in-place op or a one-out out= op passes again: such
// calls are answered from a per-op cache without running the op's own Meta
// kernel (a torch._refs function, about 100 us). The CPU probes are keyed by
// the same words over sizes cut to at most 1.
//
// Thread-safe: registration runs once; the caches take a lock.
#pragma once

#include <string>

namespace torch_neuron::lazy {

// Gives every aten op with one of the rules above its neuron Meta kernel, and
// the in-place _foreach_* ops theirs (foreach_meta.cc). Idempotent; returns
// how many ops it covers. Run after torch's Python Meta kernels are registered
// (at torch_neuron's import).
int RegisterCpuParity();

}  // namespace torch_neuron::lazy

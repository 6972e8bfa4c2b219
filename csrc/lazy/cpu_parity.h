// The CPU's errors at the call, for neuron calls: one component.
//
// A neuron op is traced, not run: its output's shape comes from the op's Meta
// kernel, and its values come much later, when the graph runs. PyTorch's Meta
// kernels miss many of the CPU kernels' checks (torch._refs' in-place ops
// accept a broadcast of self and writes into overlapping memory, out= ops cast
// where the CPU refuses, random ops take any parameters, add takes a float
// alpha for integers...), so bad input would be accepted at the call and fail
// at a later sync, in unrelated code. Each rule here raises the CPU's error
// with the CPU's words, once per rule:
//  - in-place ops: the internal-overlap check, the broadcast of the operands to
//    self's shape, the cast of the result into self's dtype;
//  - checks the CPU kernels make by name (cpu_kernel_checks.h);
//  - probes: where a check depends on dtypes and parameters in ways a table
//    would only copy, the same call on one-element CPU tensors raises the
//    CPU's error (and warns its warnings), once per signature;
//  - out= ops: a CPU-accepted out dtype that a Meta kernel wants exact is
//    given the CPU's answer.
// They run as neuron's Meta kernels (neuron_meta.h): where neuron runs a Meta
// kernel for itself (the tracer's shape inference, the out= checks of
// out_checks.h, functionalization's run of an in-place op in neuron_inplace.h),
// never on the Meta dispatch key, so meta tensors and the fake tensors of every
// other device keep PyTorch's own kernels (issue 48). The per-op choices are
// op traits (ir/op_traits.h) and schema facts.
//
// A signature (dtypes, sizes, strides, the kinds of numbers and the values of
// integers) that passed the checks of a pointwise in-place op or a one-out
// out= op passes again: such calls are answered from a per-op cache without
// running the op's own Meta kernel (a torch._refs function, about 100 us).
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

// The CPU's message for writing into a tensor whose elements share memory.
extern const char kOverlapMessage[];

// The CPU's words for the refs' unsafe-cast error ("Attempting to cast from
// torch.float32 to out tensor with dtype torch.int64, ..."): "result type Float
// can't be cast to the desired output type Long". Empty where `what` is another
// error.
std::string CpuCastMessage(const std::string& what);

}  // namespace torch_neuron::lazy

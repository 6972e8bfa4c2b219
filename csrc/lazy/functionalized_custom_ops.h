// Libraries' own operators whose kernels are written in torch ops, run on
// neuron tensors under functionalization.
//
// A custom operator (torch.library.custom_op, or Library("ns", "DEF") with a
// CompositeExplicitAutograd or PrivateUse1 Python kernel) runs its kernel
// below functionalization: PyTorch's Functionalize fallback unwraps the
// arguments and calls the kernel on the traced values, where a view is a
// copy. A write through a view inside the kernel (transformers'
// grouped_mm_fallback: `torch.mm(..., out=output[start:end])`) then misses the
// tensor it views, which LazyTensor's lost-write check refuses.
//
// Such an operator gets a Functionalize kernel that, for calls on neuron
// tensors, runs the operator's kernel on the functional wrappers themselves,
// as functionalization runs a CompositeImplicitAutograd kernel: every view
// and write inside is functionalized, so writes reach the tensors they view,
// as on the CPU. A write into an argument (the schema declares them all
// read-only, see below) is an error: autograd and torch.compile rely on the
// schema. Autograd stays the operator's own:
// the kernel runs where its autograd kernel sends it, below autograd. Any
// other call (other devices, fake tensors under torch.compile's tracing) runs
// exactly the kernel that was there.
//
// Thread-safe: registration takes a lock; the kernels keep no state of their own.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace torch_neuron::lazy {

// Gives `op` the Functionalize kernel described above (once); true if `op`
// has it now. The caller decides which operators need it
// (torch_neuron/_custom_ops.py: those with a Python kernel that neuron calls
// would reach below functionalization). An operator whose schema writes an
// argument gets none: a Functionalize kernel of its own would turn
// torch.compile's auto_functionalize off for it on every device (AOTAutograd
// asks the dispatcher whether the operator has one), and PyTorch's own
// functionalization refuses it on neuron, as it does today.
bool RegisterFunctionalizedCustomOp(const c10::OperatorHandle& op);

// Removes it again (the library that registered the operator's kernel was
// destroyed); a no-op for an operator without one.
void UnregisterFunctionalizedCustomOp(const std::string& name);

// The operators that have it, "ns::op.overload" sorted.
std::vector<std::string> FunctionalizedCustomOps();

}  // namespace torch_neuron::lazy

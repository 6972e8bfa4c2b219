// Unboxed functionalization kernels for the hottest out-of-place ops.
//
// An out-of-place op on a functional tensor reaches PyTorch's boxed
// functionalization fallback: the dispatcher copies the arguments onto a
// stack of IValues, the fallback unwraps them and calls the op again below
// functionalization, then wraps the results. Copying a Python-held tensor onto
// that stack takes its refcount from 1 to 2, which makes PyTorch take the GIL
// (released by the Python binding) to keep the tensor's PyObject alive, and
// again when the stack lets go. These kernels do exactly what the fallback does
// (unwrap, sync, call below functionalization, wrap when the fallback would)
// without a stack, for calls with a neuron tensor argument; every other call
// goes to the fallback itself, so other devices' functionalization is exactly
// PyTorch's (issue 48: the Functionalize key is not per device, and neuron has
// no key of its own above it in every mode). Only ops that would reach the
// fallback are registered; an op with a functionalization kernel of its own
// keeps it.
#pragma once

#include <string>
#include <vector>

namespace torch_neuron::lazy {

// Registers (on) or removes (off) the kernels; registered at import. Tests turn
// them off to compare against the fallback (the reference).
void SetFunctionalizeFastPaths(bool on);
bool FunctionalizeFastPathsOn();

// The operators ("aten::add.Tensor", ...) that have a fast path now.
std::vector<std::string> FunctionalizeFastPathOps();

}  // namespace torch_neuron::lazy

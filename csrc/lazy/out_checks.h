// The checks of out= ops, at the call.
//
// Functionalization turns `op(..., out=t)` into the functional op and a write
// of its result into `t`, converting the dtype as it writes: the out= op's own
// kernel, whose checks (the result's dtype can be cast to `t`'s, the shapes)
// the CPU runs, never runs, and PyTorch's functionalization checks in-place ops
// with their Meta kernels but not out= ops. So on neuron the out= ops first run
// their Meta kernel on meta copies of their arguments, and raise its error
// where it finds one, and go on to functionalization. Where the Meta kernel
// cannot say (a data-dependent shape, no Meta kernel: nonzero, masked_select,
// histogram) the op runs as the CPU's kernel on CPU copies and its results are
// written into the outs, as the CPU fallback would run it anyway. Autograd's
// out= rule (no argument may require grad) is checked first, as on the CPU.
#pragma once

namespace torch_neuron::lazy {

// Registers the check for every aten out= op with a kernel of its own (not a
// composite that decomposes into checked ops), for neuron tensors only (at
// AutogradPrivateUse1; under inference_mode, which skips that key, in the op's
// Functionalize kernel, for neuron calls only). Idempotent; returns how many
// ops it covers.
int RegisterOutChecks();

}  // namespace torch_neuron::lazy

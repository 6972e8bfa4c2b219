// Neuron's own Meta kernels: the CPU's checks in front of an op's Meta kernel,
// for neuron calls only.
//
// The lazy device computes results' shapes by running Meta kernels on meta
// copies of the arguments, and PyTorch's Meta kernels miss some of the CPU's
// checks (torch._refs' in-place ops accept a broadcast of self, out= ops cast
// where the CPU refuses...). The kernels that add them are kept here, keyed by
// operator, and run wherever neuron runs a Meta kernel for itself (the tracer's
// shape inference, the out= checks, the in-place checks of neuron_inplace.h).
// They are never registered on the Meta dispatch key: meta tensors of every
// other device keep PyTorch's own kernels (issue 48).
//
// Thread-safe: registration takes a lock; lookups read a map that only grows
// under that lock (kernels live as long as the process).
#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

namespace torch_neuron::lazy {

// Makes `kernel` neuron's Meta kernel of `op` (replacing an earlier one).
void SetNeuronMetaKernel(const c10::OperatorHandle& op, c10::KernelFunction kernel);

// Whether `op` has a neuron Meta kernel.
bool HasNeuronMetaKernel(const c10::OperatorHandle& op);

// Runs `op` on the meta tensors of `stack`: neuron's Meta kernel where it has
// one, else the C++ meta function of a structured op (structured_meta.h), else
// the op's Meta kernel (as op.redispatchBoxed(Meta) does). A call with
// symbolic sizes (torch.compile's fakes) always takes the op's Meta kernel, so
// neuron's Meta kernels and the C++ meta functions see concrete sizes only.
void RunNeuronMeta(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs `op`'s own Meta kernel on `stack` (what RunNeuronMeta runs where `op`
// has no neuron Meta kernel): neuron's Meta kernels call it after their checks.
void RunOwnMeta(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Sets the in-place _foreach_* ops' neuron Meta kernels (foreach_meta.cc), once.
void RegisterForeachMeta();

// The operators with a neuron Meta kernel, "aten::add_.Tensor" sorted.
std::vector<std::string> NeuronMetaKernelOps();

}  // namespace torch_neuron::lazy

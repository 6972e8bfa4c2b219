// Ops whose kernels write arguments their schemas declare read-only.
// native_batch_norm updates its running statistics in place in training mode,
// yet its schema has no (a!) on them, so functionalization passes the buffers
// down as inputs and never learns of the write: traced as it is, the update
// would be lost (BatchNorm and InstanceNorm buffers would never move). The
// tracer rewrites such calls into their functional forms and assigns the new
// values to the written tensors.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>

namespace torch_neuron::lazy {

// Whether the operator named `name` ("aten::native_batch_norm") writes
// arguments its schema does not declare written.
bool HasHiddenMutation(const std::string& name);

// Traces such an op; false where this call writes nothing (batch norm in
// evaluation mode, or without running statistics): trace it as it is.
bool TraceHiddenMutation(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuron::lazy

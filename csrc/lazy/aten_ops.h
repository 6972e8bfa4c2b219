// Walks the aten operators the dispatcher holds, for registrations that cover
// many ops at once (the tracer's kernels of composite ops, the out= checks).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <string>

namespace torch_neuron::lazy {

// Calls `fn` with every aten operator that has a schema, and the name
// torch::Library::impl takes for it ("add.Tensor", "relu").
void ForEachAtenOp(const std::function<void(const c10::OperatorHandle&, const std::string&)>& fn);

}  // namespace torch_neuron::lazy

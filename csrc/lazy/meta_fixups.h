// Meta-kernel fixups: where torch's Meta kernel of an op gives other output
// shapes or dtypes than its CPU kernel, the tracer corrects them here, since the
// device must return exactly what the CPU would (batch norm's saved statistics,
// embedding bags' bookkeeping outputs, nansum over an empty dim list).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

#include "ir/shape.h"
#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {

// Output metadata of one traced call: the shapes of every returned tensor,
// their layouts (what the CPU would report as their strides and storage
// offsets), and for each return how many tensors it holds (-1: a single tensor).
struct MetaResult {
  std::vector<ir::Shape> shapes;
  std::vector<TensorLayout> layouts;
  std::vector<int> counts;
};

// Corrects a Meta kernel's shapes where the CPU kernel returns others; the
// device must return exactly what the CPU would. Gets the op's arguments.
using MetaFixup = void (*)(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                           MetaResult* result);

// The fixup of the operator named `name` ("aten::nansum"), or nullptr.
MetaFixup MetaFixupFor(const std::string& name);

}  // namespace torch_neuron::lazy

// Text and Graphviz DOT renderings of a canonical graph, for humans and for
// golden tests. Both are deterministic: the same graph prints the same text.
#pragma once

#include <string>

#include "ir/graph.h"

namespace torch_neuron::ir {

// One line per node:  %2 = aten::mul.Tensor(%0, %1) : f32[2,3]
std::string ToText(const CanonicalGraph& graph);

std::string ToDot(const CanonicalGraph& graph);

}  // namespace torch_neuron::ir

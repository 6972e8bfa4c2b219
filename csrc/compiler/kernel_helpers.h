// The C helper functions generated kernels call (vectorizable exp, tanh and
// erf; bfloat16 and float16 conversions) and which of them a kernel needs.
#pragma once

#include <string>

namespace torch_neuron::compiler {

// The definitions of the helpers that `calls` (a kernel's formulas and
// conversions, as C text) names, with the helpers they call themselves, in
// dependency order; "" when it names none.
std::string HelperSource(const std::string& calls);

// Every helper's definition (part of the codegen's identity in the compiler
// fingerprint).
std::string AllHelperSource();

}  // namespace torch_neuron::compiler

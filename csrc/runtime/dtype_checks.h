// The dtype table's refusal at torch's boundary: a dtype the device does not
// hold raises torch's TypeError, naming the supported ones (base/dtypes.h).
#pragma once

#include <c10/core/ScalarType.h>

namespace torch_neuron::runtime {

// Raises TypeError naming the dtype and the supported ones.
void CheckSupportedDtype(c10::ScalarType dtype);

}  // namespace torch_neuron::runtime

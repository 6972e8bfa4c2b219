// The element types a neuron device holds.
#pragma once

#include <c10/core/ScalarType.h>

namespace torch_neuron::runtime {

// float32/64, float16, bfloat16, signed and unsigned 8-bit, int16/32/64 and bool.
// Complex, quantized, float8 and bit-packed types are not supported.
bool IsSupportedDtype(c10::ScalarType dtype);

// Raises TypeError naming the dtype and the supported ones.
void CheckSupportedDtype(c10::ScalarType dtype);

}  // namespace torch_neuron::runtime

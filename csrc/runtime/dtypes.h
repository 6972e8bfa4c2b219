// The element types a neuron device holds.
#pragma once

#include <c10/core/ScalarType.h>

namespace torch_neuron::runtime {

// float32/64, float16, bfloat16, complex64/128, signed and unsigned integers of
// 8 to 64 bits and bool. complex32, quantized, float8 and bit-packed types are
// not supported.
bool IsSupportedDtype(c10::ScalarType dtype);

// uint16, uint32 and uint64: PyTorch's CPU kernels implement few ops for them
// (copies, views, comparisons, casts; not add or max), so ops on them run as
// the CPU's own kernels, one at a time (the lazy tracer sends them through the
// CPU fallback): the CPU's results and the CPU's errors, at the call.
bool IsHostOnlyDtype(c10::ScalarType dtype);

// Raises TypeError naming the dtype and the supported ones.
void CheckSupportedDtype(c10::ScalarType dtype);

}  // namespace torch_neuron::runtime

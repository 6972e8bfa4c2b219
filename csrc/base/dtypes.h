// The element types a neuron device holds: one table, one row per dtype, with
// every per-dtype fact a stage needs (IR text, torch's name, the element type
// of generated kernels, host-only, exact in float32). A stage that needs a
// new fact adds a column here, not a switch of its own.
#pragma once

#include <c10/core/ScalarType.h>

#include <vector>

namespace torch_neuron {

struct DtypeFacts {
  c10::ScalarType type;
  const char* short_name;   // in IR text and shapes: "f32"
  const char* python_name;  // torch's name: "float32"
  // The element's C type in generated kernels (bfloat16 and float16 are their
  // bits), or nullptr where kernels do not load or store it.
  const char* kernel_c_type;
  // Run as the CPU's own kernels, one op at a time: uint16, uint32 and uint64,
  // for which PyTorch's CPU kernels implement few ops (copies, views,
  // comparisons, casts; not add or max). The lazy tracer sends them through
  // the CPU fallback: the CPU's results and the CPU's errors, at the call.
  bool host_only;
  // Every value is exactly a float32 (generated kernels compute in float32).
  bool exact_in_float32;
};

// Every supported dtype: float32/64, float16, bfloat16, complex64/128, signed
// and unsigned integers of 8 to 64 bits and bool. complex32, quantized, float8
// and bit-packed types are not supported.
const std::vector<DtypeFacts>& SupportedDtypes();

// The row of `dtype`, or nullptr when it is not supported.
const DtypeFacts* FactsOf(c10::ScalarType dtype);

bool IsSupportedDtype(c10::ScalarType dtype);
bool IsHostOnlyDtype(c10::ScalarType dtype);

// Raises TypeError naming the dtype and the supported ones.
void CheckSupportedDtype(c10::ScalarType dtype);

}  // namespace torch_neuron

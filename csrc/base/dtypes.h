// The element types a neuron device holds: one table, one row per dtype, with
// every per-dtype fact a stage needs (IR text, torch's name, the element type
// of generated kernels, host-only, exact in float32). A stage that needs a
// new fact adds a column here, not a switch of its own.
//
// base/ sees no torch, so a row names its dtype by code: its number in torch's
// c10::ScalarType, the number NEFFs and CompileRequests store (a format
// contract already). Callers pass a c10::ScalarType itself (the lookups take
// any enum and convert); tests/cpp/base/dtypes_test.cc checks every row
// against torch's own names. Refusing a dtype with torch's TypeError is
// runtime/dtype_checks.h's. Thread-safe (immutable).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

namespace torch_neuron {

struct DtypeFacts {
  int8_t code;              // c10::ScalarType's number
  const char* short_name;   // in IR text and shapes: "f32"
  const char* python_name;  // torch's name: "float32"
  // The element's C type in generated kernels (bfloat16 and float16 are their
  // bits), or nullptr where kernels do not load or store it.
  const char* kernel_c_type;
  // Run as the CPU's own kernels, one op at a time: uint16, uint32 and uint64,
  // for which PyTorch's CPU kernels implement few ops (copies, views,
  // comparisons, casts; not add or max), and complex32, which PyTorch's
  // kernels (CUDA's as the CPU's) implement for creation, copies, casts,
  // view_as_real and a few pointwise ops. The lazy tracer sends them through
  // the CPU fallback: the CPU's results and the CPU's errors (naming the op
  // and the dtype), at the call.
  bool host_only;
  // Every value is exactly a float32 (generated kernels compute in float32).
  bool exact_in_float32;
};

// Every supported dtype: float32/64, float16, bfloat16, complex32/64/128,
// signed and unsigned integers of 8 to 64 bits and bool. Quantized, float8 and
// bit-packed types are not supported.
const std::vector<DtypeFacts>& SupportedDtypes();

// The row of the dtype numbered `code`, or nullptr when it is not supported.
const DtypeFacts* FactsOfCode(int code);

// The lookups by dtype: `Dtype` is c10::ScalarType (an enum numbered as the
// codes are).
template <typename Dtype, typename = std::enable_if_t<std::is_enum_v<Dtype>>>
const DtypeFacts* FactsOf(Dtype dtype) {
  return FactsOfCode(static_cast<int>(dtype));
}

template <typename Dtype, typename = std::enable_if_t<std::is_enum_v<Dtype>>>
bool IsSupportedDtype(Dtype dtype) {
  return FactsOf(dtype) != nullptr;
}

template <typename Dtype, typename = std::enable_if_t<std::is_enum_v<Dtype>>>
bool IsHostOnlyDtype(Dtype dtype) {
  const DtypeFacts* facts = FactsOf(dtype);
  return facts != nullptr && facts->host_only;
}

}  // namespace torch_neuron

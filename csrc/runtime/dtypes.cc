#include "runtime/dtypes.h"

#include <c10/util/Exception.h>

namespace torch_neuron::runtime {

bool IsSupportedDtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Byte:
    case c10::ScalarType::Char:
    case c10::ScalarType::Short:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
    case c10::ScalarType::UInt16:
    case c10::ScalarType::UInt32:
    case c10::ScalarType::UInt64:
    case c10::ScalarType::Bool:
    case c10::ScalarType::ComplexFloat:
    case c10::ScalarType::ComplexDouble:
      return true;
    default:
      return false;
  }
}

bool IsHostOnlyDtype(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::UInt16 || dtype == c10::ScalarType::UInt32 ||
         dtype == c10::ScalarType::UInt64;
}

void CheckSupportedDtype(c10::ScalarType dtype) {
  TORCH_CHECK_TYPE(IsSupportedDtype(dtype), "neuron devices do not support dtype ", c10::toString(dtype),
                   "; supported: float32, float64, float16, bfloat16, complex64, complex128, "
                   "uint8, uint16, uint32, uint64, int8, int16, int32, int64, bool");
}

}  // namespace torch_neuron::runtime

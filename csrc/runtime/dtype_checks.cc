#include "runtime/dtype_checks.h"

#include <c10/util/Exception.h>

#include <string>

#include "base/dtypes.h"

namespace torch_neuron::runtime {

void CheckSupportedDtype(c10::ScalarType dtype) {
  if (IsSupportedDtype(dtype)) return;
  std::string supported;
  for (const DtypeFacts& row : SupportedDtypes()) {
    if (!supported.empty()) supported += ", ";
    supported += row.python_name;
  }
  TORCH_CHECK_TYPE(false, "neuron devices do not support dtype ", c10::toString(dtype),
                   "; supported: ", supported);
}

}  // namespace torch_neuron::runtime

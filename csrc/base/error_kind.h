// The one table from a failed absl::Status to the exception a user sees
// (DESIGN.md "Seams", 7). Both foreign boundaries read it: ATen kernels and hooks
// (runtime/torch_status.h, c10 exceptions) and the pybind11 bindings
// (python/module.cc, Python exceptions), so a status raises the same Python
// type whichever way it leaves.
#pragma once

#include "absl/status/status.h"

namespace torch_neuron {

enum class ErrorKind {
  kOutOfMemory,     // torch.OutOfMemoryError (c10::OutOfMemoryError)
  kValue,           // ValueError (c10::ValueError)
  kNotImplemented,  // NotImplementedError (c10::NotImplementedError)
  kRuntime,         // RuntimeError (c10::Error)
};

// RESOURCE_EXHAUSTED -> kOutOfMemory; INVALID_ARGUMENT, OUT_OF_RANGE -> kValue;
// UNIMPLEMENTED -> kNotImplemented; every other code -> kRuntime.
ErrorKind ErrorKindFor(absl::StatusCode code);

// The Python exception's name, for messages and tests.
const char* ErrorKindName(ErrorKind kind);

}  // namespace torch_neuron

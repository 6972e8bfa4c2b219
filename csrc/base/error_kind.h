// The one table from a failed absl::Status to the exception a user sees
// (DESIGN.md "Seams", 7). Both foreign boundaries read it: ATen kernels and hooks
// (runtime/torch_status.h, c10 exceptions) and the pybind11 bindings
// (python/module.cc, Python exceptions), so a status raises the same Python
// type whichever way it leaves.
//
// The status code decides, unless the status records a kind of its own
// (WithErrorKind): an error that came from a c10 exception keeps that
// exception's Python type (a TypeError is INVALID_ARGUMENT, but raises
// TypeError again) however many layers carry it.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace torch_neuron {

enum class ErrorKind {
  kOutOfMemory,     // torch.OutOfMemoryError (c10::OutOfMemoryError)
  kValue,           // ValueError (c10::ValueError)
  kType,            // TypeError (c10::TypeError)
  kIndex,           // IndexError (c10::IndexError)
  kNotImplemented,  // NotImplementedError (c10::NotImplementedError)
  kLinAlg,          // torch.linalg.LinAlgError (c10::LinAlgError)
  kRuntime,         // RuntimeError (c10::Error)
};

// RESOURCE_EXHAUSTED -> kOutOfMemory; INVALID_ARGUMENT -> kValue; OUT_OF_RANGE
// -> kIndex; UNIMPLEMENTED -> kNotImplemented; every other code -> kRuntime.
ErrorKind ErrorKindFor(absl::StatusCode code);

// The kind `status` raises: the one recorded on it, else its code's.
ErrorKind ErrorKindOf(const absl::Status& status);

// `status` recording `kind` (a payload), where its code alone names another.
absl::Status WithErrorKind(absl::Status status, ErrorKind kind);

// The Python exception's name, for messages and tests.
const char* ErrorKindName(ErrorKind kind);

// `status` with `context` before its message ("context: message"); code and
// payloads (the recorded kind) are kept. An OK status stays OK.
absl::Status WithContext(const absl::Status& status, absl::string_view context);
// The same with `context` after the message ("message (context)").
absl::Status WithTrailingContext(const absl::Status& status, absl::string_view context);

}  // namespace torch_neuron

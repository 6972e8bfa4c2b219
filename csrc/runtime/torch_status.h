// The ATen boundary for Status, both ways. Kernels and hooks call ThrowIfError,
// so a failed Status becomes the c10 exception base/error_kind.h's table names
// (torch turns it into torch.OutOfMemoryError, ValueError, TypeError,
// IndexError, NotImplementedError, LinAlgError or RuntimeError). Code that
// calls into ATen and reports a Status (the executor, the graph runner) turns
// what ATen threw back into one with StatusFromException, whose kind raises the
// same exception type again: an IndexError of a kernel that ran at a sync is an
// IndexError at the sync.
#pragma once

#include <c10/util/Exception.h>

#include <exception>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/error_kind.h"

namespace torch_neuron::runtime {

[[noreturn]] void ThrowStatus(const absl::Status& status);

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return std::move(value).value();
}

// The Status of a caught exception: a c10 exception's message without its
// backtrace, with the kind of its class (ThrowIfError of the result throws the
// same class); std::bad_alloc is RESOURCE_EXHAUSTED; anything else UNKNOWN.
absl::Status StatusFromException(const std::exception& e);

// The Status of the exception being handled (call inside a catch block).
absl::Status StatusFromCurrentException();

}  // namespace torch_neuron::runtime

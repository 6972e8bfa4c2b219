// The ATen boundary for Status: kernels and hooks call ThrowIfError, so a failed
// Status becomes the c10 exception base/error_kind.h's table names (torch turns
// it into torch.OutOfMemoryError, ValueError, NotImplementedError or
// RuntimeError).
#pragma once

#include <c10/util/Exception.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/error_kind.h"

namespace torch_neuron::runtime {

inline void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  const std::string message(status.message());
  switch (ErrorKindFor(status.code())) {
    case ErrorKind::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    case ErrorKind::kNotImplemented:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    case ErrorKind::kValue:
      TORCH_CHECK_VALUE(false, message);
    case ErrorKind::kRuntime:
      break;
  }
  TORCH_CHECK(false, message);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return std::move(value).value();
}

}  // namespace torch_neuron::runtime

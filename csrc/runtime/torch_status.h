// The ATen boundary for Status: kernels and hooks call ThrowIfError so a failed
// Status becomes the torch exception a user expects (torch.OutOfMemoryError for
// RESOURCE_EXHAUSTED, NotImplementedError for UNIMPLEMENTED, RuntimeError else).
#pragma once

#include <c10/util/Exception.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torch_neuron::runtime {

inline void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    case absl::StatusCode::kUnimplemented:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      TORCH_CHECK_VALUE(false, message);
    default:
      TORCH_CHECK(false, message);
  }
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return std::move(value).value();
}

}  // namespace torch_neuron::runtime

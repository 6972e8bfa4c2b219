#include "base/error_kind.h"

namespace torch_neuron {

ErrorKind ErrorKindFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kResourceExhausted:
      return ErrorKind::kOutOfMemory;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return ErrorKind::kValue;
    case absl::StatusCode::kUnimplemented:
      return ErrorKind::kNotImplemented;
    default:
      return ErrorKind::kRuntime;
  }
}

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOutOfMemory:
      return "torch.OutOfMemoryError";
    case ErrorKind::kValue:
      return "ValueError";
    case ErrorKind::kNotImplemented:
      return "NotImplementedError";
    case ErrorKind::kRuntime:
      break;
  }
  return "RuntimeError";
}

}  // namespace torch_neuron

#include "runtime/torch_status.h"

#include <new>
#include <string>

#include "absl/strings/str_cat.h"

namespace torch_neuron::runtime {

void ThrowStatus(const absl::Status& status) {
  const std::string message(status.message());
  switch (ErrorKindOf(status)) {
    case ErrorKind::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    case ErrorKind::kNotImplemented:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    case ErrorKind::kValue:
      TORCH_CHECK_VALUE(false, message);
    case ErrorKind::kType:
      TORCH_CHECK_TYPE(false, message);
    case ErrorKind::kIndex:
      TORCH_CHECK_INDEX(false, message);
    case ErrorKind::kLinAlg:
      TORCH_CHECK_LINALG(false, message);
    case ErrorKind::kRuntime:
      break;
  }
  TORCH_CHECK(false, message);
}

absl::Status StatusFromException(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  if (c10_error == nullptr) {
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("host out of memory (", e.what(), ")"));
    }
    return absl::UnknownError(e.what());
  }
  const std::string message = c10_error->what_without_backtrace();
  // Most derived classes first: each is a c10::Error.
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return absl::ResourceExhaustedError(message);
  if (dynamic_cast<const c10::NotImplementedError*>(&e) != nullptr) return absl::UnimplementedError(message);
  if (dynamic_cast<const c10::IndexError*>(&e) != nullptr) return absl::OutOfRangeError(message);
  if (dynamic_cast<const c10::ValueError*>(&e) != nullptr) return absl::InvalidArgumentError(message);
  if (dynamic_cast<const c10::TypeError*>(&e) != nullptr) {
    return WithErrorKind(absl::InvalidArgumentError(message), ErrorKind::kType);
  }
  if (dynamic_cast<const c10::LinAlgError*>(&e) != nullptr) {
    return WithErrorKind(absl::UnknownError(message), ErrorKind::kLinAlg);
  }
  return absl::UnknownError(message);
}

absl::Status StatusFromCurrentException() {
  try {
    throw;
  } catch (const std::exception& e) {
    return StatusFromException(e);
  } catch (...) {
    return absl::UnknownError("an exception that is not a std::exception");
  }
}

}  // namespace torch_neuron::runtime

#include "base/error_kind.h"

#include <array>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace torch_neuron {
namespace {

// Where WithErrorKind records a kind: the value is ErrorKindName's text.
constexpr absl::string_view kKindPayload = "type.torch-neuron.dev/error_kind";

constexpr std::array<ErrorKind, 7> kAllKinds = {
    ErrorKind::kOutOfMemory,    ErrorKind::kValue,  ErrorKind::kType,    ErrorKind::kIndex,
    ErrorKind::kNotImplemented, ErrorKind::kLinAlg, ErrorKind::kRuntime,
};

absl::Status Rewritten(const absl::Status& status, std::string message) {
  absl::Status out(status.code(), message);
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace

ErrorKind ErrorKindFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kResourceExhausted:
      return ErrorKind::kOutOfMemory;
    case absl::StatusCode::kInvalidArgument:
      return ErrorKind::kValue;
    case absl::StatusCode::kOutOfRange:
      return ErrorKind::kIndex;
    case absl::StatusCode::kUnimplemented:
      return ErrorKind::kNotImplemented;
    default:
      return ErrorKind::kRuntime;
  }
}

ErrorKind ErrorKindOf(const absl::Status& status) {
  if (auto recorded = status.GetPayload(kKindPayload)) {  // absl::optional in Debian's Abseil
    for (ErrorKind kind : kAllKinds) {
      if (*recorded == ErrorKindName(kind)) return kind;
    }
  }
  return ErrorKindFor(status.code());
}

absl::Status WithErrorKind(absl::Status status, ErrorKind kind) {
  if (status.ok()) return status;
  if (ErrorKindFor(status.code()) == kind) {
    status.ErasePayload(kKindPayload);
  } else {
    status.SetPayload(kKindPayload, absl::Cord(ErrorKindName(kind)));
  }
  return status;
}

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOutOfMemory:
      return "torch.OutOfMemoryError";
    case ErrorKind::kValue:
      return "ValueError";
    case ErrorKind::kType:
      return "TypeError";
    case ErrorKind::kIndex:
      return "IndexError";
    case ErrorKind::kNotImplemented:
      return "NotImplementedError";
    case ErrorKind::kLinAlg:
      return "torch.linalg.LinAlgError";
    case ErrorKind::kRuntime:
      break;
  }
  return "RuntimeError";
}

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) return status;
  return Rewritten(status, absl::StrCat(context, ": ", status.message()));
}

absl::Status WithTrailingContext(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) return status;
  return Rewritten(status, absl::StrCat(status.message(), " (", context, ")"));
}

}  // namespace torch_neuron

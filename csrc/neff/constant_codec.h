// Converting program constants (c10::IValue) to and from their NEFF form.
#pragma once

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "proto/neff.pb.h"

namespace torch_neuron::neff {

absl::Status EncodeConstant(const c10::IValue& value, proto::ConstantValue* out);

// DATA_LOSS for a value that cannot be what a writer produced (bad dtype,
// tensor bytes that do not match its sizes, unknown kind).
absl::StatusOr<c10::IValue> DecodeConstant(const proto::ConstantValue& value);

// Whether a stored dtype code names a c10::ScalarType.
bool ValidDtype(int32_t dtype);

}  // namespace torch_neuron::neff

// Writing NEFF files: a payload the compiler filled (fingerprint, graph hash,
// signature, program, native objects, source map) in the layout of
// neff_format.h, with the format version, the header and the checksum.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "proto/neff.pb.h"

namespace torch_neuron::neff {

// The NEFF bytes of `payload` (its format_version is set here; it may live on
// an arena).
absl::StatusOr<std::string> WriteNeff(proto::NeffPayload& payload);

}  // namespace torch_neuron::neff

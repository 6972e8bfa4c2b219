// Reading NEFF files. Every field is validated before anything is built: the
// header, the checksum, the format version, the compiler fingerprint, and the
// program's structure (registers in range, operators that exist with the
// argument counts their schemas have, constants of the declared sizes). Any
// mismatch is an error Status; no input crashes the reader or reads out of
// bounds (fuzzed by tests/fuzz/neff_reader_fuzzer.cc).
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "proto/neff.pb.h"
#include "runtime/program.h"

namespace torch_neuron::neff {

struct LoadedNeff {
  std::shared_ptr<const runtime::Program> program;
  proto::NeffPayload payload;  // metadata (program field cleared)
};

// `expected`: the fingerprint the caller compiles with; a NEFF made by another
// is FAILED_PRECONDITION. nullptr skips that check (inspection tools).
// Malformed input is DATA_LOSS naming what is wrong.
absl::StatusOr<LoadedNeff> ReadNeff(std::string_view bytes, const proto::CompilerFingerprint* expected);

}  // namespace torch_neuron::neff

// Writing NEFF files: a compiled Program with its fingerprint, graph hash,
// signature and source map, in the layout of neff_format.h.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/hash.h"
#include "proto/neff.pb.h"
#include "runtime/program.h"

namespace torch_neuron::neff {

struct NeffContents {
  const runtime::Program* program = nullptr;
  proto::CompilerFingerprint fingerprint;
  ir::hash_t graph_hash = 0;
  proto::Signature signature;
};

// The NEFF bytes. UNIMPLEMENTED if a constant of the program has no
// serialized form (the executable then lives in memory only).
absl::StatusOr<std::string> WriteNeff(const NeffContents& contents);

}  // namespace torch_neuron::neff

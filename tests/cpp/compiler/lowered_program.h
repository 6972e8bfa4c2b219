// Test helper: a CompileGraph lowered into a NEFF and read back, the one way a
// runtime Program is made (neff/ is its only builder).
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "compiler/lowering.h"
#include "neff/neff_reader.h"
#include "neff/neff_writer.h"
#include "runtime/program.h"

namespace torch_neuron::compiler {

inline absl::StatusOr<runtime::Program> Lowered(const CompileGraph& g, bool views_in_place = true) {
  proto::NeffPayload payload;
  if (absl::Status s = LowerToProgram(g, views_in_place, "", &payload); !s.ok()) return s;
  payload.set_graph_hash(std::string(16, '\0'));
  absl::StatusOr<std::string> bytes = neff::WriteNeff(payload);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(*bytes, /*expected=*/nullptr);
  if (!loaded.ok()) return loaded.status();
  return *loaded->program;
}

}  // namespace torch_neuron::compiler

// Builds the generated kernels of one graph into a shared object with the
// system C++ compiler: each kernel is its own translation unit, compiled in
// parallel (one process per core), then linked. The toolchain (compiler path,
// version, flags) is part of the compiler fingerprint.
//
// Thread-safe: each build works in its own temporary directory.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace torch_neuron::compiler {

struct Toolchain {
  std::string compiler;        // path or name on PATH ("c++")
  std::string version;         // first line of `compiler --version`, "" if it did not run
  std::vector<std::string> flags;

  // The host toolchain of C++ compiler `cxx` ("" for "c++"; the config reads
  // CXX once), probed (its --version) once per compiler.
  static const Toolchain& For(const std::string& cxx);
  // Canonical text for the fingerprint.
  std::string Describe() const;
};

// (kernel name, C++ source) pairs in, the shared object's bytes out. A failed
// compile is FAILED_PRECONDITION naming the kernel and the compiler's first
// error lines; a compiler that cannot run at all is UNAVAILABLE.
absl::StatusOr<std::string> BuildSharedObject(
    const std::vector<std::pair<std::string, std::string>>& kernels, const Toolchain& toolchain);

}  // namespace torch_neuron::compiler

// Target (DESIGN.md "Seams", 2): what the compiler's output runs on. The
// compiler is the same for every target up to its generated kernels; the
// target turns those into the native code a NEFF carries, and names everything
// of itself that changes that code, which the compiler fingerprint includes.
//
// The host target (compiler/host/) is the emulated device's: kernels are C++
// built by the system compiler for this machine's CPU, and ATen calls run on
// the host. A device target (Trainium: neuronx-cc producing the payload) is
// another implementation of this class, in a folder of its own beside host/;
// see docs/ARCHITECTURE.md "Targets".
//
// Implementations are thread-safe: compiles on several threads share one.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace torch_neuron::compiler {

class Target {
 public:
  virtual ~Target() = default;

  // The instruction set the programs run on ("x86_64-host-aten"): the
  // fingerprint's target_isa.
  virtual std::string Isa() const = 0;

  // Canonical text of everything else of the target that changes the native
  // code it builds (toolchain, version, flags): the fingerprint's target part
  // at tier 1. Speed-ups that never change the code (a cache of built kernel
  // objects) are no part of it.
  virtual std::string Describe() const = 0;

  // Builds generated kernels, given as (symbol, C++ source) pairs, into one
  // native object: its bytes. FAILED_PRECONDITION when a kernel does not build
  // (naming it and the first error lines), UNAVAILABLE when the toolchain cannot
  // run at all.
  virtual absl::StatusOr<std::string> BuildKernels(
      const std::vector<std::pair<std::string, std::string>>& kernels) const = 0;
};

}  // namespace torch_neuron::compiler

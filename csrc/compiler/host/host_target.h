// The host target: the emulated device's. Programs run ATen calls on this
// machine's CPU; generated kernels are C++ built by the system compiler
// (native_build.h) with flags for this CPU. Thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/target.h"

namespace torch_neuron::compiler {

class KernelObjectCache;
struct Toolchain;

class HostTarget : public Target {
 public:
  // `cxx`: the C++ compiler ("" for c++; the config reads CXX once), probed
  // only when a kernel is built or the target described. `objects`: where
  // built kernel objects are shared between graphs (nullptr: every kernel is
  // built), not owned.
  explicit HostTarget(std::string cxx = "", KernelObjectCache* objects = nullptr)
      : cxx_(std::move(cxx)), objects_(objects) {}

  std::string Isa() const override;
  std::string Describe() const override;
  absl::StatusOr<std::string> BuildKernels(
      const std::vector<std::pair<std::string, std::string>>& kernels) const override;

  const Toolchain& toolchain() const;
  const std::string& cxx() const { return cxx_; }

 private:
  const std::string cxx_;
  KernelObjectCache* const objects_;
};

}  // namespace torch_neuron::compiler

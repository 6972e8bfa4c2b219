#include "compiler/host/host_target.h"

#include "absl/strings/str_cat.h"
#include "compiler/host/native_build.h"

namespace torch_neuron::compiler {

std::string HostTarget::Isa() const {
#if defined(__x86_64__)
  return "x86_64-host-aten";
#elif defined(__aarch64__)
  return "aarch64-host-aten";
#else
  return "unknown-host-aten";
#endif
}

const Toolchain& HostTarget::toolchain() const { return Toolchain::For(cxx_); }

std::string HostTarget::Describe() const { return absl::StrCat("toolchain=", toolchain().Describe()); }

absl::StatusOr<std::string> HostTarget::BuildKernels(
    const std::vector<std::pair<std::string, std::string>>& kernels) const {
  return BuildSharedObject(kernels, toolchain(), objects_);
}

}  // namespace torch_neuron::compiler

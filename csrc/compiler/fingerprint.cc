#include "compiler/fingerprint.h"

#include "absl/strings/str_cat.h"

#ifndef TN_VERSION
#error "TN_VERSION (torch_neuron's version) must be defined by the build"
#endif
#ifndef TN_TORCH_VERSION_STRING
#error "TN_TORCH_VERSION_STRING must be defined by the build"
#endif

namespace torch_neuron::compiler {

proto::CompilerFingerprint MakeFingerprint(const CompileOptions& options) {
  proto::CompilerFingerprint f;
  f.set_project_version(TN_VERSION);
  f.set_torch_version(TN_TORCH_VERSION_STRING);
#if defined(__x86_64__)
  f.set_target_isa("x86_64-host-aten");
#elif defined(__aarch64__)
  f.set_target_isa("aarch64-host-aten");
#else
  f.set_target_isa("unknown-host-aten");
#endif
  f.set_tier(0);
  f.set_options(absl::StrCat("cse=", options.cse ? 1 : 0, ";fold_constants=",
                             options.fold_constants ? 1 : 0,
                             ";max_fold_elements=", options.max_fold_elements));
  return f;
}

std::string FingerprintText(const proto::CompilerFingerprint& f) {
  return absl::StrCat("torch_neuron ", f.project_version(), ", torch ", f.torch_version(), ", ",
                      f.target_isa(), ", tier ", f.tier(), ", ", f.options());
}

const proto::CompilerFingerprint& DefaultFingerprint() {
  static const auto* fingerprint = new proto::CompilerFingerprint(MakeFingerprint(CompileOptions()));
  return *fingerprint;
}

ir::hash_t HashFingerprint(const proto::CompilerFingerprint& fingerprint) {
  return ir::Hash(fingerprint.SerializeAsString());
}

ir::hash_t CacheKey(ir::hash_t graph_hash, ir::hash_t fingerprint_hash) {
  return ir::HashCombine(graph_hash, fingerprint_hash);
}

}  // namespace torch_neuron::compiler

#include "compiler/fingerprint.h"

#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "compiler/kernel_codegen.h"
#include "compiler/host/host_target.h"
#include "compiler_source_id.h"  // generated in the build tree: TN_COMPILER_SOURCE_ID

#ifndef TN_VERSION
#error "TN_VERSION (torch_neuron's version) must be defined by the build"
#endif
#ifndef TN_TORCH_VERSION_STRING
#error "TN_TORCH_VERSION_STRING must be defined by the build"
#endif

namespace torch_neuron::compiler {

proto::CompilerFingerprint MakeFingerprint(const CompileOptions& options, const Target& target) {
  proto::CompilerFingerprint f;
  f.set_project_version(TN_VERSION);
  f.set_torch_version(TN_TORCH_VERSION_STRING);
  f.set_target_isa(target.Isa());
  f.set_tier(options.opt_level >= 1 ? 1 : 0);
  f.set_compiler_source_id(TN_COMPILER_SOURCE_ID);
  std::string text =
      absl::StrCat("cse=", options.cse ? 1 : 0, ";fold_constants=", options.fold_constants ? 1 : 0,
                   ";max_fold_elements=", options.max_fold_elements);
  if (options.opt_level >= 1) {
    absl::StrAppend(&text, ";opt_level=", options.opt_level,
                    ";passes=", absl::StrJoin(PassNames(options), ","), ";codegen=", CodegenId(), ";",
                    target.Describe());
  }
  // Test-only fault injection changes what any tier computes: never the key of
  // a healthy executable.
  if (!options.fault_op.empty()) absl::StrAppend(&text, ";fault_op=", options.fault_op);
  f.set_options(text);
  return f;
}

std::string FingerprintText(const proto::CompilerFingerprint& f) {
  return absl::StrCat("torch_neuron ", f.project_version(), " (compiler ", f.compiler_source_id(),
                      "), torch ", f.torch_version(), ", ", f.target_isa(), ", tier ", f.tier(), ", ",
                      f.options());
}

const KeyedFingerprint& FingerprintFor(const CompileOptions& options, const Target& target) {
  // Lock order: before the target's (a host target's Toolchain::For), which a
  // new fingerprint probes.
  static absl::Mutex mu(absl::kConstInit);
  static auto* built = new std::map<std::string, std::unique_ptr<const KeyedFingerprint>>();
  // Tier 0 builds no native code: the target's toolchain is no part of it.
  const std::string key =
      absl::StrCat(options.opt_level >= 1 ? 1 : 0, "|", options.cse, "|", options.fold_constants, "|",
                   options.max_fold_elements, "|", options.fault_op, "|", target.Isa(), "|",
                   options.opt_level >= 1 ? target.Describe() : "");
  absl::MutexLock lock(&mu);
  std::unique_ptr<const KeyedFingerprint>& slot = (*built)[key];
  if (slot == nullptr) {
    auto made = std::make_unique<KeyedFingerprint>();
    made->fingerprint = MakeFingerprint(options, target);
    made->hash = HashFingerprint(made->fingerprint);
    slot = std::move(made);
  }
  return *slot;
}

const proto::CompilerFingerprint& FingerprintFor(int opt_level) {
  static const HostTarget* host = new HostTarget();
  CompileOptions options;
  options.opt_level = opt_level;
  return FingerprintFor(options, *host).fingerprint;
}

ir::hash_t HashFingerprint(const proto::CompilerFingerprint& fingerprint) {
  return ir::Hash(fingerprint.SerializeAsString());
}

ir::hash_t CacheKey(ir::hash_t graph_hash, ir::hash_t fingerprint_hash) {
  return ir::HashCombine(graph_hash, fingerprint_hash);
}

}  // namespace torch_neuron::compiler

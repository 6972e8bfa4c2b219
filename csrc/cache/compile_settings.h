// What graphs compile with, made from the compile sub-config: the compiler's
// options, the host target of the config's toolchain, and the fingerprints
// that key their executables (tier 1's, and tier 0's for the stand-ins of
// tiered compilation). The targets share one cache of built kernel objects,
// kept beside the disk cache so that processes share them too.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/config.h"
#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "compiler/host/host_target.h"
#include "compiler/host/native_build.h"
#include "compiler/target.h"

namespace torch_neuron::cache {

// The kernel-object cache of a compile cache whose directory is `cache_dir`
// ("": memory only) and whose bound is `cache_max_mb`: in `<dir>/kernels`,
// bounded to a tenth of the disk cache (1 GiB by default) and to
// kKernelObjectsInMemory objects in memory. The process's compiles and the
// compile service's use the same bounds.
inline constexpr size_t kKernelObjectsInMemory = 4096;
std::unique_ptr<compiler::KernelObjectCache> MakeKernelObjectCache(const std::string& cache_dir,
                                                                   int64_t cache_max_mb);

struct CompileSettings {
  compiler::CompileOptions options;
  const compiler::Target* target = nullptr;                 // lives as long as its CompileTargets
  const compiler::KeyedFingerprint* fingerprint = nullptr;  // of options and target
  // Tiered compilation (CompileConfig::tiered, at opt level 1): the
  // fingerprint of the tier-0 stand-ins; nullptr when graphs are not tiered.
  const compiler::KeyedFingerprint* stand_in = nullptr;
};

// Host targets by toolchain (tests change CXX), one per toolchain named in the
// process's life, sharing the kernel objects of the cache sub-config they were
// made with. Thread-safe; targets live as long as this object.
class CompileTargets {
 public:
  // Kernel objects beside `cache`'s disk cache when it is enabled and
  // writable, in memory only otherwise.
  explicit CompileTargets(const CacheConfig& cache);

  // The settings of `config`. Memoized per thread: asked again with the same
  // config, it compares three fields and copies the answer.
  CompileSettings SettingsFor(const CompileConfig& config);

 private:
  const compiler::Target* TargetFor(const std::string& cxx);
  CompileSettings Make(const CompileConfig& config);

  const uint64_t id_;  // names this object in the threads' memos (an address can be reused)
  const std::unique_ptr<compiler::KernelObjectCache> kernel_objects_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<const compiler::HostTarget>> targets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torch_neuron::cache

#include "cache/compile_settings.h"

#include <atomic>
#include <utility>

#include "cache/disk_cache.h"

namespace torch_neuron::cache {

std::unique_ptr<compiler::KernelObjectCache> MakeKernelObjectCache(const std::string& cache_dir,
                                                                   int64_t cache_max_mb) {
  return std::make_unique<compiler::KernelObjectCache>(cache_dir.empty() ? "" : cache_dir + "/kernels",
                                                       kKernelObjectsInMemory, (cache_max_mb << 20) / 10);
}

namespace {
std::atomic<uint64_t> next_targets_id{1};
}  // namespace

CompileTargets::CompileTargets(const CacheConfig& cache)
    : id_(next_targets_id.fetch_add(1)),
      kernel_objects_(MakeKernelObjectCache(
          cache.enabled && !cache.read_only ? (cache.dir.empty() ? DefaultCacheDir() : cache.dir) : "",
          cache.max_mb)) {}

const compiler::Target* CompileTargets::TargetFor(const std::string& cxx) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<const compiler::HostTarget>& slot = targets_[cxx];
  if (slot == nullptr) slot = std::make_unique<compiler::HostTarget>(cxx, kernel_objects_.get());
  return slot.get();
}

CompileSettings CompileTargets::Make(const CompileConfig& config) {
  CompileSettings settings;
  settings.options.opt_level = config.opt_level;
  settings.options.fault_op = config.test_fault_op;
  settings.target = TargetFor(config.cxx);
  settings.fingerprint = &compiler::FingerprintFor(settings.options, *settings.target);
  if (config.tiered && config.opt_level >= 1) {
    compiler::CompileOptions tier0 = settings.options;
    tier0.opt_level = 0;
    settings.stand_in = &compiler::FingerprintFor(tier0, *settings.target);
  }
  return settings;
}

CompileSettings CompileTargets::SettingsFor(const CompileConfig& config) {
  // The fingerprint is serialized and hashed once per option set and target
  // (FingerprintFor); this memo spares a sync even that lookup.
  struct Memo {
    uint64_t owner = 0;  // CompileTargets::id_
    int opt_level = -1;
    bool tiered = false;
    std::string cxx;
    std::string fault_op;
    CompileSettings settings;
  };
  thread_local Memo memo;
  if (memo.owner != id_ || memo.opt_level != config.opt_level || memo.tiered != config.tiered ||
      memo.cxx != config.cxx || memo.fault_op != config.test_fault_op) {
    memo.settings = Make(config);
    memo.owner = id_;
    memo.opt_level = config.opt_level;
    memo.tiered = config.tiered;
    memo.cxx = config.cxx;
    memo.fault_op = config.test_fault_op;
  }
  return memo.settings;
}

}  // namespace torch_neuron::cache

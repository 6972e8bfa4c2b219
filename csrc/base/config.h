// The configuration object: every TORCH_NEURON_* environment variable is read
// once, validated, and stored here. The top of each pipeline (the Python
// bindings, the process's executable source, a sync, the trace of an op, a
// compile's report) reads GlobalConfig() and passes the sub-config a part
// needs down to it (scripts/check_layering.py's CONFIG_READERS lists those
// readers, and fails on any other); tests change it with ScopedConfigOverride.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace torch_neuron {

enum class ExecutionMode { kLazy, kEager };

// Where executables come from: cache/ builds its provider chain (and the
// kernel objects beside the disk cache) from this.
struct CacheConfig {
  std::string dir;                // TORCH_NEURON_CACHE_DIR ("": cache::DefaultCacheDir())
  int64_t max_mb = 10240;         // TORCH_NEURON_CACHE_MAX_MB
  bool enabled = true;            // TORCH_NEURON_CACHE (0 disables the disk cache)
  bool read_only = false;         // TORCH_NEURON_CACHE=readonly
  int64_t memory_entries = 4096;  // TORCH_NEURON_CACHE_MEMORY_ENTRIES (loaded executables kept)
  int64_t memory_mb = 1024;       // TORCH_NEURON_CACHE_MEMORY_MB (their NEFF bytes)
  // TORCH_NEURON_COMPILE_SERVICE: "off", "auto" (this user's per-machine
  // service, started on first need) or the path of a service's socket.
  std::string compile_service = "off";
  double service_idle_s = 600;     // TORCH_NEURON_SERVICE_IDLE_S: an idle service exits
  double service_timeout_s = 600;  // TORCH_NEURON_SERVICE_TIMEOUT_S: wait for a reply, then compile here
  std::string remote_cache;        // TORCH_NEURON_REMOTE_CACHE: a redis[s]:// URL ("": none)
  // The fleet key that signs and checks remote_cache's entries: the text of
  // TORCH_NEURON_REMOTE_CACHE_KEY, or the contents of TORCH_NEURON_REMOTE_CACHE_KEY_FILE
  // less trailing whitespace ("": entries unsigned and unchecked).
  std::string remote_cache_key;
};

// How graphs compile: the options and target cache/ makes of it, tiering, and
// what is reported of compiles.
struct CompileConfig {
  // Compiler optimization level (TORCH_NEURON_OPT_LEVEL): 0 = tier 0 only (one
  // ATen call per op), 1 = elementwise fusion into generated kernels.
  int opt_level = 1;
  std::string cxx;  // CXX: tier 1's C++ compiler ("" = c++), read once here
  // At opt level 1, a graph whose tier-1 program is neither in memory nor in a
  // persistent cache runs at once at tier 0 while tier 1 compiles in the
  // background; later runs take tier 1 when it is ready
  // (TORCH_NEURON_TIERED_COMPILE; 0 waits for tier 1).
  bool tiered = true;
  bool debug = false;     // TORCH_NEURON_DEBUG: the recompile report
  std::string debug_dir;  // TORCH_NEURON_DEBUG_DIR: graph dumps
  // Test only (TORCH_NEURON_TEST_FAULT_OP): the compiler lowers this op wrong on
  // purpose, to show that the registry replay catches a broken lowering.
  std::string test_fault_op;
};

// What the tracer does with each op (read once per op, passed down its stages).
struct TraceConfig {
  bool ir_debug = false;  // TORCH_NEURON_IR_DEBUG: each node's source line
  // Whether ops without a device lowering may run on the CPU (TORCH_NEURON_FALLBACK).
  bool allow_cpu_fallback = true;
  // Lazy mode traces every graph size-generic (ir/graph.h): SymInt arguments
  // as parameters and hashes without sizes, so a graph whose sizes change
  // (variable lengths, routing by data) compiles once, at tier 0
  // (TORCH_NEURON_DYNAMIC_SHAPES).
  bool dynamic_shapes = false;
};

// How traced work runs: who runs it in eager mode and how a graph's execution
// is queued. Read at a sync's (or an op's) entry and passed down.
struct RunConfig {
  // Eager mode groups ops into graphs compiled in the background
  // (TORCH_NEURON_EAGER_GROUPS; 0 runs every op as its own graph, the old path).
  bool eager_groups = true;
  // Every execution is waited for where it is queued, so its error is raised
  // there: at the op in eager mode, at the sync in lazy mode
  // (TORCH_NEURON_LAUNCH_BLOCKING, like CUDA_LAUNCH_BLOCKING).
  bool launch_blocking = false;
  // Host threads that split one generated-kernel call (TORCH_NEURON_KERNEL_THREADS);
  // 0 = one per host core.
  int kernel_threads = 0;
};

// The emulated devices, consumed once when the process's device registry is
// built (runtime/device_registry.h).
struct DeviceConfig {
  // Number of emulated devices (TORCH_NEURON_NUM_DEVICES).
  int num_devices = 1;
  // Per-device memory limit in bytes, 0 = no limit (TORCH_NEURON_MEMORY_LIMIT_MB).
  int64_t memory_limit_bytes = 0;
};

// The one table of settings. Code below the top takes the sub-config it needs
// (cache, compile, trace), passed down, rather than reading this.
struct Config {
  // The mode the process starts in (lazy/execution_mode.h; set when the
  // Python package loads, then changed by torch_neuron.mode()).
  ExecutionMode mode = ExecutionMode::kLazy;
  DeviceConfig devices;
  CacheConfig cache;
  CompileConfig compile;
  TraceConfig trace;
  RunConfig run;
  std::string shape_registry;  // TORCH_NEURON_SHAPE_REGISTRY
  std::string registry_tag;    // TORCH_NEURON_REGISTRY_TAG ("": the script's name)
  // Whether backward passes on neuron tensors run on autograd's per-device
  // thread (PyTorch's default for a device) rather than the thread that calls
  // backward (TORCH_NEURON_AUTOGRAD_THREAD).
  bool autograd_thread = false;
  // Whether an optimizer's step() on neuron parameters ends the step as
  // mark_step() does, for loops that never call it (Trainer, accelerate)
  // (TORCH_NEURON_STEP_ON_OPTIMIZER).
  bool step_on_optimizer = true;
  // A torch.compile(backend="neuron") graph that cannot be one program (an op
  // on the CPU fallback, a read of a value) runs op by op on the lazy path
  // with a warning, instead of raising (TORCH_NEURON_COMPILE_FALLBACK).
  bool compile_fallback = false;
};

// Largest number of emulated devices; c10 device indices are int8.
inline constexpr int kMaxDevices = 64;

// Builds a Config from `lookup` (a getenv-like function returning "" when unset).
// A malformed value is InvalidArgument naming the variable, the value and what is
// accepted.
absl::StatusOr<Config> ConfigFromEnvironment(const std::function<std::string(const std::string&)>& lookup);

// `base` with the variables that `lookup` returns non-empty applied on top
// (scoped overrides: what they do not name keeps its value).
absl::StatusOr<Config> ApplyEnvironment(Config base,
                                        const std::function<std::string(const std::string&)>& lookup);

// Same, from a fixed map (tests).
absl::StatusOr<Config> ConfigFromMap(const std::map<std::string, std::string>& env);

// The process-wide config. InitGlobalConfig reads the real environment (the
// package's import calls it); an invalid environment makes it fail and leaves
// the defaults in place, so GlobalConfig() never reads the environment itself.
absl::Status InitGlobalConfig();
const Config& GlobalConfig();

// Replaces the global config for its lifetime (tests, and torch_neuron.config's
// Python context manager). Not thread-safe against concurrent readers that cache
// references; intended for single-threaded test setup.
class ScopedConfigOverride {
 public:
  explicit ScopedConfigOverride(Config config);
  ~ScopedConfigOverride();
  ScopedConfigOverride(const ScopedConfigOverride&) = delete;
  ScopedConfigOverride& operator=(const ScopedConfigOverride&) = delete;

 private:
  Config saved_;
};

const char* ExecutionModeName(ExecutionMode mode);

}  // namespace torch_neuron

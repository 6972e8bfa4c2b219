// Bindings of the configuration object (base/config.h).
#include <pybind11/stl.h>

#include <cstdlib>
#include <memory>

#include "base/config.h"
#include "eager/adaptive_scheduler.h"
#include "lazy/executable_cache.h"
#include "lazy/execution_mode.h"
#include "runtime/device_registry.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_neuron::python {
namespace {

py::dict ConfigToDict(const Config& c) {
  py::dict d;
  d["mode"] = ExecutionModeName(c.mode);
  d["num_devices"] = c.devices.num_devices;
  d["memory_limit_bytes"] = c.devices.memory_limit_bytes;
  d["allow_cpu_fallback"] = c.trace.allow_cpu_fallback;
  d["cache_dir"] = c.cache.dir;
  d["cache_max_mb"] = c.cache.max_mb;
  d["cache_memory_entries"] = c.cache.memory_entries;
  d["cache_memory_mb"] = c.cache.memory_mb;
  d["cxx"] = c.compile.cxx;
  d["cache_enabled"] = c.cache.enabled;
  d["cache_read_only"] = c.cache.read_only;
  d["compile_service"] = c.cache.compile_service;
  d["service_idle_s"] = c.cache.service_idle_s;
  d["service_timeout_s"] = c.cache.service_timeout_s;
  d["remote_cache"] = c.cache.remote_cache;
  // Whether there is a fleet key, never the key.
  d["remote_cache_signed"] = !c.cache.remote_cache_key.empty();
  d["ir_debug"] = c.trace.ir_debug;
  d["debug"] = c.compile.debug;
  d["debug_dir"] = c.compile.debug_dir;
  d["shape_registry"] = c.shape_registry;
  d["registry_tag"] = c.registry_tag;
  d["test_fault_op"] = c.compile.test_fault_op;
  d["opt_level"] = c.compile.opt_level;
  d["kernel_threads"] = c.run.kernel_threads;
  d["autograd_thread"] = c.autograd_thread;
  d["step_on_optimizer"] = c.step_on_optimizer;
  d["compile_fallback"] = c.compile_fallback;
  d["dynamic_shapes"] = c.trace.dynamic_shapes;
  d["eager_groups"] = c.run.eager_groups;
  d["tiered_compile"] = c.compile.tiered;
  d["launch_blocking"] = c.run.launch_blocking;
  return d;
}

// An override that first waits for eager mode's background compiles, which
// read the config: it changes (and is restored) only while none runs.
class QuietOverride {
 public:
  explicit QuietOverride(Config config) {
    WaitForCompiles();
    override_ = std::make_unique<ScopedConfigOverride>(std::move(config));
  }
  ~QuietOverride() {
    WaitForCompiles();
    override_.reset();
  }

 private:
  static void WaitForCompiles() {
    py::gil_scoped_release release;  // a compile may want the GIL (source lines)
    eager::WaitForGroupCompiles();
    lazy::WaitForBackgroundCompiles();
  }
  std::unique_ptr<ScopedConfigOverride> override_;
};

}  // namespace

void BindConfig(py::module_& m) {
  // Reads the environment once (a malformed TORCH_NEURON_* value raises
  // ValueError), builds the devices from it, so settings consumed at start-up
  // (device count, memory limits) keep their effect, and starts in its mode.
  m.def("_init", [] {
    RaiseIfError(InitGlobalConfig());
    const Config& config = GlobalConfig();
    runtime::DeviceRegistry::InitGlobal(config.devices);
    lazy::SetMode(config.mode);
  });
  m.def("_config", [] { return ConfigToDict(GlobalConfig()); });
  // Tiered compilation's background tier-1 compiles (tests, exit).
  m.def("_wait_background_compiles", [] {
    py::gil_scoped_release release;
    lazy::WaitForBackgroundCompiles();
  });
  m.def("_drop_queued_background_compiles", [] { lazy::DropQueuedBackgroundCompiles(); });
  // Validates an environment mapping without installing it (tests, CLIs).
  m.def("_parse_config", [](const std::map<std::string, std::string>& env) {
    absl::StatusOr<Config> c = ConfigFromMap(env);
    RaiseIfError(c.status());
    return ConfigToDict(*c);
  });
  // A scoped override: settings named like their environment variables replace
  // the process's for the lifetime of the object (torch_neuron.config.override).
  // Settings that were consumed at start-up (device count, memory limit) keep
  // their values; see torch_neuron/config.py.
  py::class_<QuietOverride>(m, "_ConfigOverride")
      .def(py::init([](const std::map<std::string, std::string>& overrides) {
        // On top of the settings in force (outer overrides included); the
        // environment is not read again.
        absl::StatusOr<Config> c = ApplyEnvironment(GlobalConfig(), [&](const std::string& name) {
          auto it = overrides.find(name);
          return it != overrides.end() ? it->second : std::string();
        });
        RaiseIfError(c.status());
        return std::make_unique<QuietOverride>(*std::move(c));
      }));
}

}  // namespace torch_neuron::python

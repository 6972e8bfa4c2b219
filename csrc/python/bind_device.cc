// Bindings of the emulated devices: count, current device, memory statistics and
// limits, default generators (torch.neuron.* is built on these).
#include <torch/csrc/Generator.h>

#include <pybind11/stl.h>

#include "python/bindings.h"
#include "runtime/device_registry.h"
#include "runtime/fork_guard.h"
#include "runtime/generator.h"

namespace py = pybind11;

namespace torch_neuron::python {
namespace {

runtime::DeviceArena& ArenaOf(int device) {
  if (runtime::InBadFork()) RaiseIfError(runtime::BadForkError());
  runtime::DeviceRegistry& registry = runtime::DeviceRegistry::Global();
  const int index = registry.Resolve(device);
  RaiseIfError(registry.CheckIndex(index));
  return registry.arena(index);
}

// Keys follow torch.cuda.memory_stats() where a counterpart exists.
py::dict StatsToDict(const runtime::ArenaStats& s) {
  py::dict d;
  d["allocated_bytes.all.current"] = s.allocated_bytes;
  d["allocated_bytes.all.peak"] = s.peak_allocated_bytes;
  d["reserved_bytes.all.current"] = s.reserved_bytes;
  d["reserved_bytes.all.peak"] = s.peak_reserved_bytes;
  d["active.all.current"] = s.active_blocks;
  d["inactive_split.all.current"] = s.cached_blocks;
  d["num_ooms"] = s.num_ooms;
  d["num_allocs"] = s.num_allocs;
  d["num_frees"] = s.num_frees;
  d["num_cache_hits"] = s.num_cache_hits;
  d["num_host_allocs"] = s.num_host_allocs;
  d["num_host_frees"] = s.num_host_frees;
  d["limit_bytes"] = s.limit_bytes;
  return d;
}

}  // namespace

void BindDevice(py::module_& m) {
  m.def("_device_count", [] { return runtime::DeviceRegistry::Global().device_count(); });
  m.def("_current_device", [] { return runtime::DeviceRegistry::Global().current_device(); });
  m.def("_set_device",
        [](int index) { RaiseIfError(runtime::DeviceRegistry::Global().SetCurrentDevice(index)); });
  m.def("_check_device",
        [](int index) { RaiseIfError(runtime::DeviceRegistry::Global().CheckIndex(index)); });
  m.def("_memory_stats", [](int device) { return StatsToDict(ArenaOf(device).Stats()); });
  m.def("_reset_peak_memory_stats", [](int device) { ArenaOf(device).ResetPeakStats(); });
  m.def("_in_bad_fork", [] { return runtime::InBadFork(); });
  // Fork quiescence, for tests: units still running at this child's fork, and
  // forks (in this process) that went ahead before runtime units finished.
  m.def("_units_busy_at_fork", [] { return runtime::UnitsBusyAtFork(); });
  m.def("_units_busy", [] { return runtime::UnitsBusy(); });
  m.def("_forks_without_quiet", [] { return runtime::ForksWithoutQuiet(); });
  m.def("_empty_cache", [] {
    if (runtime::InBadFork()) RaiseIfError(runtime::BadForkError());
    runtime::DeviceRegistry& registry = runtime::DeviceRegistry::Global();
    for (int i = 0; i < registry.device_count(); ++i) registry.arena(i).EmptyCache();
  });
  m.def("_set_memory_limit", [](int device, int64_t bytes) {
    if (bytes < 0) throw py::value_error("memory limit must be >= 0 bytes (0 = unlimited)");
    ArenaOf(device).SetLimit(bytes);
  });
  m.def("_default_generator", [](int device) {
    runtime::DeviceRegistry& registry = runtime::DeviceRegistry::Global();
    const int index = registry.Resolve(device);
    RaiseIfError(registry.CheckIndex(index));
    const at::Generator& gen = runtime::DefaultNeuronGenerator(static_cast<c10::DeviceIndex>(index));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
  });
}

}  // namespace torch_neuron::python

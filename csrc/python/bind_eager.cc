// Bindings of adaptive eager mode (eager/adaptive_scheduler.h): installed as
// eager mode's scheduler when the module loads; what tests and the metrics
// report read about its groups.
#include <pybind11/stl.h>

#include <tuple>

#include "eager/adaptive_scheduler.h"
#include "ir/hash.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_neuron::python {

void BindEager(py::module_& m) {
  eager::InstallAdaptiveScheduler();
  m.def("_eager_wait_compiles", [] {
    py::gil_scoped_release release;
    eager::WaitForGroupCompiles();
  });
  m.def("_eager_drop_queued_compiles", [] { eager::DropQueuedGroupCompiles(); });
  // Test hook: every group compile queued while on fails.
  m.def("_eager_fail_group_compiles_for_testing",
        [](bool fail) { eager::FailGroupCompilesForTesting(fail); });
  // (key as 16 hex digits, ops, ran as one graph) per ended group, oldest first.
  m.def("_eager_recent_groups", [] {
    std::vector<std::tuple<std::string, int, bool>> out;
    for (const eager::EndedGroup& g : eager::RecentGroups()) {
      char hex[17];
      std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(g.key));
      out.emplace_back(hex, g.ops, g.as_graph);
    }
    return out;
  });
  m.def("_eager_reset_history", [] { eager::ResetHistory(); });
  // (ops in compiled groups, ops, steps counted) over the last `steps` mark_steps.
  m.def(
      "_eager_grouped_share",
      [](int steps) {
        if (steps < 1) throw py::value_error("steps must be at least 1, got " + std::to_string(steps));
        const eager::GroupedShare share = eager::GroupedShareOfLastSteps(steps);
        return std::make_tuple(share.grouped, share.ops, share.steps);
      },
      py::arg("steps"));
}

}  // namespace torch_neuron::python

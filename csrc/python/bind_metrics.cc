// Bindings of the metrics registry (base/metrics.h): torch_neuron.metrics.
#include "base/metrics.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_neuron::python {

void BindMetrics(py::module_& m) {
  m.def("_metrics_counters", [] {
    const proto::MetricsSnapshot snapshot = metrics::Snapshot();
    py::dict d;
    for (const auto& [name, value] : snapshot.counters()) d[py::str(name)] = value;
    return d;
  });
  // The snapshot as a serialized proto::MetricsSnapshot (torch_neuron.metrics.save).
  m.def("_metrics_snapshot_bytes", [] { return py::bytes(metrics::Snapshot().SerializeAsString()); });
  // Parses a serialized snapshot back into a dict; ValueError if malformed.
  m.def("_metrics_parse_snapshot", [](const py::bytes& data) {
    proto::MetricsSnapshot snapshot;
    if (!snapshot.ParseFromString(std::string(data))) {
      throw py::value_error("not a torch_neuron metrics snapshot (protobuf parse failed)");
    }
    if (snapshot.format_version() != 1) {
      throw py::value_error("unsupported metrics snapshot format_version " +
                            std::to_string(snapshot.format_version()) + " (this build reads 1)");
    }
    py::dict d;
    for (const auto& [name, value] : snapshot.counters()) d[py::str(name)] = value;
    return d;
  });
  m.def("_metrics_reset", [] { metrics::Reset(); });
  m.def("_metrics_increment",
        [](const std::string& name, int64_t delta) { metrics::Increment(name, delta); });
}

}  // namespace torch_neuron::python

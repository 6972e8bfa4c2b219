// Bindings of the shape registry's recorder (registry/recorder.h), used by
// torch_neuron.registry, which stores the records in SQLite.
#include <pybind11/stl.h>

#include "python/bindings.h"
#include "registry/recorder.h"

namespace py = pybind11;

namespace torch_neuron::python {

void BindRegistry(py::module_& m) {
  m.def("_registry_start", [] { registry::StartRecording(); });
  m.def("_registry_stop", [] { registry::StopRecording(); });
  m.def("_registry_recording", [] { return registry::IsRecording(); });
  m.def("_registry_set_tag", [](std::string tag) { registry::GlobalRecorder().SetTag(std::move(tag)); });
  m.def("_registry_tag", [] { return registry::GlobalRecorder().tag(); });
  m.def("_registry_size", [] { return registry::GlobalRecorder().size(); });
  m.def("_registry_format_version", [] { return registry::kFormatVersion; });
  // The records since the last take, as (tag, op, args_json, fallback_reason, count).
  m.def("_registry_take", [] {
    std::vector<registry::Record> records;
    {
      py::gil_scoped_release release;
      records = registry::GlobalRecorder().Take();
    }
    py::list out;
    for (registry::Record& r : records) {
      out.append(py::make_tuple(r.tag, r.op, r.args, r.fallback_reason, r.count));
    }
    return out;
  });
}

}  // namespace torch_neuron::python

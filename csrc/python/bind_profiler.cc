// Bindings of the device profiler (base/profiler.h), which
// torch_neuron.profiler.trace turns into a Chrome / Perfetto trace file.
#include <pybind11/stl.h>

#include <tuple>

#include "base/profiler.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_neuron::python {

void BindProfiler(py::module_& m) {
  m.def("_profiler_start", [] { profiler::Start(); });
  // (events as (category, name, source, start_ns, duration_ns, thread), dropped).
  m.def("_profiler_stop", [] {
    int64_t dropped = 0;
    std::vector<profiler::Event> events = profiler::Stop(&dropped);
    std::vector<std::tuple<std::string, std::string, std::string, int64_t, int64_t, int64_t>> out;
    out.reserve(events.size());
    for (profiler::Event& e : events) {
      out.emplace_back(std::move(e.category), std::move(e.name), std::move(e.source), e.start_ns,
                       e.duration_ns, e.thread);
    }
    return std::make_tuple(std::move(out), dropped);
  });
  m.def("_profiler_name_thread", [](std::string name) { profiler::NameThisThread(std::move(name)); });
  m.def("_profiler_thread_names", [] { return profiler::ThreadNames(); });
}

}  // namespace torch_neuron::python

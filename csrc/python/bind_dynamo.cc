// Bindings of the compiled road (dynamo/compiled_graph.h): the backend
// "neuron" (torch_neuron/_compile_backend.py) keeps one _CompiledGraph per
// traced graph and input shapes.
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/config.h"
#include "dynamo/compiled_graph.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_neuron::python {
namespace {

// A list (or tuple) of tensors, unpacked without pybind11's generic casters:
// a compiled region's call converts its inputs on every call.
std::vector<at::Tensor> TensorList(const py::handle& seq) {
  PyObject* fast = PySequence_Fast(seq.ptr(), "expected a list of tensors");
  if (fast == nullptr) throw py::error_already_set();
  py::object owner = py::reinterpret_steal<py::object>(fast);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  std::vector<at::Tensor> out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!THPVariable_Check(items[i])) throw py::type_error("expected a list of tensors");
    out.push_back(THPVariable_Unpack(items[i]));
  }
  return out;
}

py::list WrapAll(std::vector<at::Tensor> tensors) {
  py::list out(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    out[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(tensors[i])));
  }
  return out;
}

}  // namespace

void BindDynamo(py::module_& m) {
  using dynamo::CompiledGraph;
  m.def("_region_device",
        [](const py::handle& inputs) { return CompiledGraph::TraceableDevice(TensorList(inputs)); });
  py::class_<CompiledGraph>(m, "_CompiledGraph")
      .def(py::init<>())
      .def(
          "begin_trace",
          [](CompiledGraph& g, int device, const py::handle& inputs, bool size_generic) {
            return WrapAll(g.BeginTrace(device, TensorList(inputs), size_generic));
          },
          py::arg("device"), py::arg("inputs"), py::arg("size_generic") = false)
      .def_property_readonly("size_generic", &CompiledGraph::size_generic)
      .def("end_trace", [](CompiledGraph& g,
                           const py::handle& outputs) { return WrapAll(g.EndTrace(TensorList(outputs))); })
      .def("abort_trace", &CompiledGraph::AbortTrace)
      // The results, or None when the inputs do not fit the trace.
      .def("run",
           [](CompiledGraph& g, const py::handle& inputs) -> py::object {
             const Config& config = GlobalConfig();  // the top of a region's run
             std::optional<std::vector<at::Tensor>> results =
                 g.Run(TensorList(inputs), config.trace, config.run);
             if (!results) return py::none();
             return WrapAll(std::move(*results));
           })
      .def_property_readonly("traced", &CompiledGraph::traced)
      // Running a size-generic trace at other sizes (compiled_graph.h).
      .def("arm_origins", &CompiledGraph::ArmOrigins, py::arg("op"), py::arg("args"))
      .def("param_origins", &CompiledGraph::param_origins)
      .def_property_readonly("origins_blocker", &CompiledGraph::origins_blocker)
      .def("param_value", &CompiledGraph::param_value)
      .def("output_sizes", &CompiledGraph::output_sizes)
      .def("result_sources", &CompiledGraph::result_sources)
      .def("result_layouts", &CompiledGraph::result_layouts)
      .def("mutation_sources", &CompiledGraph::mutation_sources)
      .def("run_at",
           [](CompiledGraph& g, const py::handle& inputs,
              const std::vector<std::pair<size_t, int64_t>>& params,
              const std::vector<std::vector<int64_t>>& output_sizes,
              const std::vector<CompiledGraph::ResultLayout>& layouts) -> py::object {
             const Config& config = GlobalConfig();  // the top of a region's run
             std::optional<std::vector<at::Tensor>> results =
                 g.RunAt(TensorList(inputs), params, output_sizes, layouts, config.trace, config.run);
             if (!results) return py::none();
             return WrapAll(std::move(*results));
           })
      .def("links", [](const CompiledGraph& g) {
        py::dict d;
        d["linked_inputs"] = g.linked_inputs();
        d["frozen_inputs"] = g.frozen_inputs();
        d["mutated_inputs"] = g.mutated_inputs();
        return d;
      });
}

}  // namespace torch_neuron::python

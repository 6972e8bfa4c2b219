// Bindings of the lazy core: sync points, execution mode, IR dumps.
#include <ATen/FunctionalStorageImpl.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>

#include <pybind11/functional.h>

#include <cstring>
#include <string>
#include <pybind11/stl.h>

#include "base/config.h"
#include "compiler/compile_request.h"
#include "compiler/compiler.h"
#include "ir/op_traits.h"
#include "ir/printer.h"
#include "lazy/executable_cache.h"
#include "lazy/bridge.h"
#include "lazy/cpu_parity.h"
#include "lazy/functionalized_custom_ops.h"
#include "lazy/neuron_inplace.h"
#include "lazy/neuron_meta.h"
#include "lazy/functionalize_fast.h"
#include "lazy/out_checks.h"
#include "lazy/execution_mode.h"
#include "lazy/graph_executor.h"
#include "lazy/scheduler.h"
#include "lazy/step_graph.h"
#include "lazy/structured_meta.h"
#include "lazy/tracer.h"
#include "python/bindings.h"
#include "runtime/device_registry.h"
#include "runtime/execution_queue.h"
#include "runtime/torch_status.h"

namespace py = pybind11;

namespace torch_neuron::python {
namespace {

// A frame of the code FX generates for a GraphModule ("<eval_with_key>.N": the
// graph of a torch.compile region, forward or backward) stands for the user's
// line its node was traced from. torch_neuron/debug.py sets the function that
// maps such a frame to that "file:line" ("" when it cannot: the walk goes on
// outward). A strong reference, read and written under the GIL, never freed.
constexpr char kFxGeneratedFile[] = "<eval_with_key>";
PyObject* fx_frame_resolver = nullptr;

std::string ResolveFxFrame(PyFrameObject* frame) {
  if (fx_frame_resolver == nullptr || PyErr_Occurred()) return std::string();
  PyObject* result = PyObject_CallOneArg(fx_frame_resolver, reinterpret_cast<PyObject*>(frame));
  std::string where;
  if (result != nullptr && PyUnicode_Check(result)) {
    const char* text = PyUnicode_AsUTF8(result);
    if (text != nullptr) where = text;
  }
  Py_XDECREF(result);
  if (PyErr_Occurred()) PyErr_Clear();  // a resolver error only costs the line
  return where;
}

// "file:line" of the innermost Python frame of this thread whose file is not
// under one of `skip` (torch's and torch_neuron's directories): a walk over
// the frame chain comparing file-name prefixes, cheap enough for every op of
// eager mode (benchmarks/bench_tracing.py measures it). A frame of a compiled
// region's FX code gives the line of its node's user code (ResolveFxFrame).
// "" on a thread with no Python frame (autograd's workers) or while the
// interpreter shuts down.
std::string UserFrame(const std::vector<std::string>& skip) {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return std::string();
  const PyGILState_STATE gil = PyGILState_Ensure();
  std::string where;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    bool internal = file == nullptr;
    for (const std::string& prefix : skip) {
      internal = internal || std::strncmp(file, prefix.data(), prefix.size()) == 0;
    }
    if (!internal && std::strncmp(file, kFxGeneratedFile, sizeof(kFxGeneratedFile) - 1) == 0) {
      where = ResolveFxFrame(frame);
      internal = where.empty();
    } else if (!internal) {
      where = std::string(file) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
    }
    Py_DECREF(code);
    PyFrameObject* back = internal ? PyFrame_GetBack(frame) : nullptr;
    Py_DECREF(frame);
    frame = back;
  }
  if (PyErr_Occurred()) PyErr_Clear();  // a file name that is not UTF-8
  PyGILState_Release(gil);
  return where;
}

std::vector<lazy::LazyTensorPtr> LazyTensors(const py::list& tensors) {
  std::vector<lazy::LazyTensorPtr> out;
  for (const py::handle& obj : tensors) {
    if (!THPVariable_Check(obj.ptr())) throw py::type_error("expected a list of tensors");
    const at::Tensor& t = THPVariable_Unpack(obj.ptr());
    lazy::LazyTensorPtr lazy = lazy::TryGetLazy(t);
    if (lazy == nullptr) {
      throw py::value_error("expected neuron tensors, got a tensor on " +
                            (t.defined() ? t.device().str() : std::string("no device")));
    }
    out.push_back(std::move(lazy));
  }
  return out;
}

std::vector<at::Tensor> Tensors(const py::list& tensors) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const py::handle& obj : tensors) {
    if (!THPVariable_Check(obj.ptr())) throw py::type_error("expected a list of tensors");
    out.push_back(THPVariable_Unpack(obj.ptr()));
  }
  return out;
}

void BindStepGraph(py::module_& m) {
  using lazy::StepGraph;
  py::class_<StepGraph>(m, "_StepGraph")
      .def(py::init<>())
      .def("begin", [](StepGraph& g, int device, const py::list& state) { g.Begin(device, Tensors(state)); })
      .def("end", [](StepGraph& g, const py::list& state) { g.End(Tensors(state)); })
      .def("abort", &StepGraph::Abort)
      .def("replay",
           [](StepGraph& g) {
             const Config& config = GlobalConfig();  // the top of a replay
             g.Replay(config.trace, config.run);
           })
      .def("reset", &StepGraph::Reset)
      .def_property_readonly("captured", &StepGraph::captured)
      .def_property_readonly("capturing", &StepGraph::capturing)
      .def("links", [](const StepGraph& g) {
        py::dict d;
        d["linked_inputs"] = g.linked_inputs();
        d["frozen_inputs"] = g.frozen_inputs();
        d["linked_outputs"] = g.linked_outputs();
        d["other_outputs"] = g.other_outputs();
        return d;
      });
}

}  // namespace

// UntypedStorage.resize_ of a neuron tensor's storage (a functionalization
// storage, which holds no bytes of its own). FSDP2 frees an unsharded
// parameter's storage with resize_(0) and brings it back with resize_(n)
// before copying the all-gathered values in. As in PyTorch's functionalization
// of such resizes (for torch.compile): only to or from zero bytes, and no op
// is traced: the size the storage reports changes, the values are the ones
// the next write (FSDP's copy-in) gives it.
void ResizeNeuronStorage(const py::object& storage, int64_t nbytes) {
  if (!THPStorage_Check(storage.ptr())) throw py::type_error("expected a torch.UntypedStorage");
  if (nbytes < 0) throw py::value_error("storage size must be >= 0 bytes");
  c10::StorageImpl* impl = THPStorage_Unpack(storage.ptr()).unsafeGetStorageImpl();
  auto* functional = dynamic_cast<at::functionalization::FunctionalStorageImpl*>(impl);
  if (functional == nullptr) {
    throw std::runtime_error(
        "resize_() of this neuron storage is not supported: it is not the "
        "storage of a neuron tensor");
  }
  const int64_t current = static_cast<int64_t>(impl->nbytes());
  if (nbytes == current) return;
  if (nbytes != 0 && current != 0) {
    throw std::runtime_error(
        "a neuron tensor's storage can be resized only to 0 bytes or from 0 "
        "bytes (the pattern FSDP2 uses), not from " +
        std::to_string(current) + " to " + std::to_string(nbytes) + " bytes; resize the tensor instead");
  }
  impl->set_nbytes(static_cast<size_t>(nbytes));
  functional->mark_inductor_storage_resize(c10::SymInt(nbytes));
}

void BindLazy(py::module_& m) {
  m.def("_resize_neuron_storage", &ResizeNeuronStorage);
  BindStepGraph(m);
  m.def("_register_tracer", [] { return lazy::RegisterTracerForCompositeOps(); });
  m.def("_register_functionalize_overrides", [] { lazy::RegisterFunctionalizeOverrides(); });
  // Tests compare the unboxed functionalization kernels with PyTorch's fallback.
  m.def("_set_functionalize_fast_paths", [](bool on) { lazy::SetFunctionalizeFastPaths(on); });
  m.def("_functionalize_fast_path_ops", [] { return lazy::FunctionalizeFastPathOps(); });
  m.def("_register_out_checks", [] { return lazy::RegisterOutChecks(); });
  // The CPU's errors at the call, as neuron's Meta kernels (lazy/cpu_parity.h).
  m.def("_register_cpu_parity", [] { return lazy::RegisterCpuParity(); });
  m.def("_neuron_meta_ops", [] { return lazy::NeuronMetaKernelOps(); });
  m.def("_neuron_inplace_ops", [] { return lazy::NeuronInPlaceOps(); });
  m.def("_neuron_inplace_ops_run_functional", [] { return lazy::NeuronInPlaceOpsRunFunctional(); });
  // Libraries' operators whose kernels run functionalized on neuron tensors
  // (lazy/functionalized_custom_ops.h; torch_neuron/_custom_ops.py picks them).
  m.def("_functionalize_custom_op", [](const std::string& name) {
    const size_t dot = name.find('.', name.find("::"));
    const std::string op = name.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    return lazy::RegisterFunctionalizedCustomOp(
        c10::Dispatcher::singleton().findSchemaOrThrow(op.c_str(), overload.c_str()));
  });
  m.def("_unfunctionalize_custom_op",
        [](const std::string& name) { lazy::UnregisterFunctionalizedCustomOp(name); });
  m.def("_functionalized_custom_ops", [] { return lazy::FunctionalizedCustomOps(); });
  // The CPU-parity traits of an op ("aten::add_.Tensor"), for tests.
  m.def("_cpu_parity_traits", [](const std::string& op) {
    const ir::OpTraits& t = ir::TraitsOf(op);
    py::dict d;
    d["writes_overlapping_memory"] = t.writes_overlapping_memory;
    d["writes_metadata_only"] = t.writes_metadata_only;
    d["elementwise_untagged"] = t.elementwise_untagged;
    d["casts_before_own_checks"] = t.casts_before_own_checks;
    d["probes_random_parameters"] = t.probes_random_parameters;
    d["probes_on_cpu"] = t.probes_on_cpu;
    d["probe_by_kinds"] = t.probe_by_kinds;
    return d;
  });
  // Syncs run without the GIL: a sync may wait for a lock (eager mode's
  // device group) held by a thread that wants the GIL (a compile asking for
  // the user's source line), or join a compile another thread leads.
  m.def(
      "_mark_step",
      [](int device) {
        py::gil_scoped_release release;
        lazy::GraphExecutor::Get().MarkStep(device);
      },
      py::arg("device") = -1);
  m.def("_finish_pending_work", [] {
    py::gil_scoped_release release;
    const std::vector<int> devices = lazy::GraphExecutor::Get().QueuePendingWork();
    // Drained without taking an error: the next sync raises it.
    for (int d : devices) runtime::ExecutionQueue::ForDevice(d).Drain();
  });
  m.def("_sync", [](const py::list& tensors) {
    std::vector<lazy::LazyTensorPtr> lazy_tensors = LazyTensors(tensors);
    py::gil_scoped_release release;
    lazy::GraphExecutor::Get().Sync(lazy_tensors);
  });
  m.def("_wait_device", [](int device) {
    py::gil_scoped_release release;
    lazy::GraphExecutor::Get().WaitDevice(device);
  });
  // The tracer's table of C++ Meta kernels (lazy/structured_meta.h): its ops,
  // and a switch for tests that trace both ways (returns the old setting).
  m.def("_structured_meta_ops", [] { return lazy::StructuredMetaOps(); });
  m.def("_set_structured_meta", [](bool enabled) { return lazy::SetStructuredMetaEnabled(enabled); });
  m.def("_ir_text", [](const py::list& tensors) {
    return ir::ToText(lazy::GraphExecutor::Get().PendingGraph(LazyTensors(tensors)));
  });
  m.def("_ir_dot", [](const py::list& tensors) {
    return ir::ToDot(lazy::GraphExecutor::Get().PendingGraph(LazyTensors(tensors)));
  });
  // The pending graph compiled with the settings in force (nothing runs): the
  // IR after the passes and the generated kernels' sources.
  m.def("_compiled_text", [](const py::list& tensors) {
    ir::CanonicalGraph g = lazy::GraphExecutor::Get().PendingGraph(LazyTensors(tensors));
    const cache::CompileSettings settings = lazy::CurrentCompileSettings();
    absl::StatusOr<proto::CompileRequest> request = compiler::MakeCompileRequest(g, settings.options);
    runtime::ThrowIfError(request.status());
    absl::StatusOr<compiler::CompileResult> result =
        compiler::Compile(*request, settings.options, *settings.target);
    runtime::ThrowIfError(result.status());
    return py::make_tuple(result->optimized_text, result->kernel_sources);
  });
  // The pending graph as a serialized CompileRequest (what the compile service
  // receives), and a request read back and compiled: (graph hash, node count,
  // IR after the passes, kernel sources). Debugging and tests.
  m.def("_compile_request", [](const py::list& tensors) {
    ir::CanonicalGraph g = lazy::GraphExecutor::Get().PendingGraph(LazyTensors(tensors));
    absl::StatusOr<proto::CompileRequest> request =
        compiler::MakeCompileRequest(g, lazy::CurrentCompileSettings().options);
    RaiseIfError(request.status());
    return py::bytes(request->SerializeAsString());
  });
  m.def("_compile_from_request", [](const py::bytes& bytes) {
    const std::string data = bytes;
    absl::StatusOr<std::unique_ptr<compiler::RequestGraph>> read = compiler::ParseCompileRequest(data);
    RaiseIfError(read.status());
    proto::CompileRequest request;
    request.ParseFromString(data);  // parsed above
    absl::StatusOr<compiler::CompileResult> result =
        compiler::Compile(request, (*read)->options, *lazy::CurrentCompileSettings().target);
    RaiseIfError(result.status());
    return py::make_tuple(ir::HashToHex((*read)->graph.hash), (*read)->graph.size(), result->optimized_text,
                          result->kernel_sources);
  });
  m.def("_graph_hash", [](const py::list& tensors) {
    return ir::HashToHex(lazy::GraphExecutor::Get().PendingGraph(LazyTensors(tensors)).hash);
  });
  m.def("_pending_count", [](const py::list& tensors) {
    int n = 0;
    for (const auto& t : LazyTensors(tensors)) n += t->is_pending() ? 1 : 0;
    return n;
  });
  m.def("_live_tensor_count", [] { return lazy::LiveTensorCount(); });
  m.def("_get_mode", [] { return std::string(ExecutionModeName(lazy::CurrentMode())); });
  m.def("_set_mode", [](const std::string& mode) {
    if (mode == "lazy") {
      // What eager mode held back runs first: lazy mode does not know of it.
      if (lazy::CurrentMode() == ExecutionMode::kEager) {
        const int count = runtime::DeviceRegistry::Global().device_count();
        for (int d = 0; d < count; ++d) lazy::EagerScheduler(GlobalConfig().run).BeforeSync(d, false);
      }
      lazy::SetMode(ExecutionMode::kLazy);
    } else if (mode == "eager") {
      lazy::SetMode(ExecutionMode::kEager);
    } else {
      throw py::value_error("mode must be 'lazy' or 'eager', got '" + mode + "'");
    }
  });
  // The getter runs while tracing or compiling, also on autograd's worker
  // threads (backward ops), where there is no Python frame: pybind11's wrapper
  // takes the GIL, and a Python error there must not escape into the tracer.
  m.def("_set_source_location_getter", [](std::function<std::string()> getter) {
    lazy::SetSourceLocationGetter([getter = std::move(getter)]() -> std::string {
      try {
        return getter();
      } catch (py::error_already_set& e) {
        py::gil_scoped_acquire gil;
        e.discard_as_unraisable("torch_neuron source location getter");
        return std::string();
      }
    });
  });
  // The same from C++ (UserFrame), skipping frames of files under `skip`.
  m.def("_set_native_source_location_getter", [](std::vector<std::string> skip) {
    lazy::SetSourceLocationGetter([skip = std::move(skip)] { return UserFrame(skip); });
  });
  m.def("_set_fx_frame_resolver", [](py::object resolver) {
    PyObject* old = fx_frame_resolver;
    fx_frame_resolver = resolver.release().ptr();
    Py_XDECREF(old);
  });
  m.def("_is_capturing", [](int device) { return lazy::GraphExecutor::Get().IsCapturing(device); });
  m.def("_last_recompile_reason", [] { return lazy::GraphExecutor::Get().LastRecompileReason(); });
  m.def("_clear_compile_cache", [] {
    py::gil_scoped_release release;  // waits for background compiles, which may want the GIL
    lazy::GraphExecutor::Get().ClearCache();
  });
}

}  // namespace torch_neuron::python

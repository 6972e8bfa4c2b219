// torch_neuron._C: the extension module. Loading it registers the neuron device
// with PyTorch (allocator, guard, hooks and kernels are static registrations in
// libtorch_neuron.so); _init() then reads the configuration.
#include "python/bindings.h"

#include "absl/synchronization/mutex.h"
#include "base/error_kind.h"
#include "runtime/torch_status.h"

namespace torch_neuron::python {

namespace {

[[noreturn]] void Raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw pybind11::error_already_set();
}

}  // namespace

void RaiseIfError(const absl::Status& status) {
  // pybind11 turns a c10 exception thrown here into a plain RuntimeError (torch's
  // translation lives in its own bindings' macros), so the Python type is set
  // directly, from the same table ThrowIfError uses.
  if (status.ok()) return;
  const std::string message(status.message());
  switch (ErrorKindOf(status)) {
    case ErrorKind::kOutOfMemory:
      Raise(pybind11::module_::import("torch").attr("OutOfMemoryError").ptr(), message);
    case ErrorKind::kValue:
      Raise(PyExc_ValueError, message);
    case ErrorKind::kType:
      Raise(PyExc_TypeError, message);
    case ErrorKind::kIndex:
      Raise(PyExc_IndexError, message);
    case ErrorKind::kNotImplemented:
      Raise(PyExc_NotImplementedError, message);
    case ErrorKind::kLinAlg:
      Raise(pybind11::module_::import("torch").attr("linalg").attr("LinAlgError").ptr(), message);
    case ErrorKind::kRuntime:
      break;
  }
  Raise(PyExc_RuntimeError, message);
}

}  // namespace torch_neuron::python

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_neuron's C++ core";
#ifdef NDEBUG
  // Debian builds Abseil with its debug-mode deadlock detector on: every Mutex
  // lock and destruction then updates a global lock-order graph. A release
  // build of torch_neuron turns it off for the process; a Debug build
  // (TORCH_NEURON_BUILD_TYPE=Debug) keeps it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  torch_neuron::python::BindCache(m);
  torch_neuron::python::BindConfig(m);
  torch_neuron::python::BindDevice(m);
  torch_neuron::python::BindDlpack(m);
  torch_neuron::python::BindMetrics(m);
  torch_neuron::python::BindProfiler(m);
  torch_neuron::python::BindLazy(m);
  torch_neuron::python::BindEager(m);
  torch_neuron::python::BindDynamo(m);
  torch_neuron::python::BindRegistry(m);
  torch_neuron::python::BindService(m);
  // For tests of the Status -> exception table: raises what a binding raises for
  // a failed status of this absl::StatusCode. With `through_aten`, the status
  // first leaves as the c10 exception a kernel throws and is caught back
  // (StatusFromException), as the executor does with what an ATen call throws.
  m.def(
      "_raise_status",
      [](int code, const std::string& message, bool through_aten) {
        absl::Status status(static_cast<absl::StatusCode>(code), message);
        if (through_aten) {
          try {
            torch_neuron::runtime::ThrowIfError(status);
          } catch (...) {
            status = torch_neuron::runtime::StatusFromCurrentException();
          }
        }
        torch_neuron::python::RaiseIfError(status);
      },
      pybind11::arg("code"), pybind11::arg("message"), pybind11::arg("through_aten") = false);
}

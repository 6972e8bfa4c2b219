// torch_neuron._C: the extension module. Loading it registers the neuron device
// with PyTorch (allocator, guard, hooks and kernels are static registrations in
// libtorch_neuron.so); _init() then reads the configuration.
#include "python/bindings.h"

#include "absl/synchronization/mutex.h"
#include "runtime/torch_status.h"

namespace torch_neuron::python {

void RaiseIfError(const absl::Status& status) {
  // ThrowIfError raises c10 exceptions, which torch's pybind11 glue does not see
  // here; translate the common codes directly.
  if (status.ok()) return;
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      throw pybind11::value_error(message);
    case absl::StatusCode::kNotFound:
      throw pybind11::key_error(message);
    default:
      throw std::runtime_error(message);
  }
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
  torch_neuron::python::BindMetrics(m);
  torch_neuron::python::BindLazy(m);
}

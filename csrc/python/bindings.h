// pybind11 bindings of torch_neuron._C, split by subsystem. This folder is the
// only one that includes Python headers.
#pragma once

#include <pybind11/pybind11.h>

#include "absl/status/status.h"

namespace torch_neuron::python {

void BindCache(pybind11::module_& m);
void BindConfig(pybind11::module_& m);
void BindDevice(pybind11::module_& m);
void BindLazy(pybind11::module_& m);
void BindMetrics(pybind11::module_& m);

// Raises the Python exception matching `status` (ValueError for INVALID_ARGUMENT,
// MemoryError-like torch.OutOfMemoryError for RESOURCE_EXHAUSTED, RuntimeError else).
void RaiseIfError(const absl::Status& status);

}  // namespace torch_neuron::python

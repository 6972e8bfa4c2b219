// pybind11 bindings of torch_neuron._C, split by subsystem. This folder is the
// only one that includes Python headers.
#pragma once

#include <pybind11/pybind11.h>

#include "absl/status/status.h"

namespace torch_neuron::python {

void BindCache(pybind11::module_& m);
void BindConfig(pybind11::module_& m);
void BindDevice(pybind11::module_& m);
void BindDlpack(pybind11::module_& m);
void BindDynamo(pybind11::module_& m);
void BindEager(pybind11::module_& m);
void BindLazy(pybind11::module_& m);
void BindMetrics(pybind11::module_& m);
void BindProfiler(pybind11::module_& m);
void BindRegistry(pybind11::module_& m);
void BindService(pybind11::module_& m);

// Raises the Python exception base/error_kind.h's table names for `status`
// (torch.OutOfMemoryError for RESOURCE_EXHAUSTED, ValueError for INVALID_ARGUMENT
// and OUT_OF_RANGE, NotImplementedError for UNIMPLEMENTED, RuntimeError else).
void RaiseIfError(const absl::Status& status);

}  // namespace torch_neuron::python

// Bindings of DLPack for neuron tensors (lazy/dlpack.h): capsules made and
// read under PyTorch's names ("dltensor", "dltensor_versioned"; "used_..."
// once read), for torch_neuron/_tensor_support.py's __dlpack__ and imports.
#include <torch/csrc/autograd/python_variable.h>

#include "lazy/dlpack.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_neuron::python {
namespace {

constexpr char kName[] = "dltensor";
constexpr char kVersionedName[] = "dltensor_versioned";
constexpr char kUsedName[] = "used_dltensor";
constexpr char kUsedVersionedName[] = "used_dltensor_versioned";

// A capsule nobody read still owns its payload.
void DeleteUnread(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kName)) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kName));
    if (managed->deleter != nullptr) managed->deleter(managed);
  } else if (PyCapsule_IsValid(capsule, kVersionedName)) {
    auto* managed = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedName));
    if (managed->deleter != nullptr) managed->deleter(managed);
  }
}

py::object ToCapsule(const at::Tensor& t, bool versioned) {
  void* managed = nullptr;
  {
    py::gil_scoped_release release;  // the sync may wait for the device
    managed = versioned ? static_cast<void*>(lazy::ToDLPackVersioned(t)) : lazy::ToDLPack(t);
  }
  PyObject* capsule = PyCapsule_New(managed, versioned ? kVersionedName : kName, DeleteUnread);
  if (capsule == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(capsule);
}

// The neuron tensor of a capsule made by ToCapsule (the capsule is then read:
// renamed, its payload freed), or None for any other object.
template <class Managed>
py::object Read(const py::object& capsule, const char* name, const char* used_name,
                std::optional<at::Tensor> (*from)(const Managed*)) {
  auto* managed = static_cast<Managed*>(PyCapsule_GetPointer(capsule.ptr(), name));
  std::optional<at::Tensor> tensor = from(managed);
  if (!tensor.has_value()) return py::none();
  PyCapsule_SetName(capsule.ptr(), used_name);
  managed->deleter(managed);
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(*tensor));
}

}  // namespace

void BindDlpack(py::module_& m) {
  m.def("_neuron_to_dlpack", &ToCapsule, py::arg("tensor"), py::arg("versioned"));
  m.def("_neuron_from_dlpack", [](const py::object& obj) -> py::object {
    if (PyCapsule_IsValid(obj.ptr(), kName)) {
      return Read<DLManagedTensor>(obj, kName, kUsedName, &lazy::FromDLPack);
    }
    if (PyCapsule_IsValid(obj.ptr(), kVersionedName)) {
      return Read<DLManagedTensorVersioned>(obj, kVersionedName, kUsedVersionedName,
                                            &lazy::FromDLPackVersioned);
    }
    return py::none();
  });
}

}  // namespace torch_neuron::python

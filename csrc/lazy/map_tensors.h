// MapTensors: an IValue with a function applied to each tensor it holds, for
// kernels that rewrite a boxed op's arguments (meta copies, unwrapping).
#pragma once

#include <optional>
#include <vector>

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace torch_neuron::lazy {

// A list of optional tensors, also as TorchScript passes one (x[mask] = v in a
// scripted function): a generic list whose element type is another instance
// of Optional[Tensor], so isOptionalTensorList() is false and
// toOptionalTensorList() asserts. Its elements are tensors or None.
inline bool IsOptionalTensorListLike(const c10::IValue& v) {
  if (v.isOptionalTensorList()) return true;
  if (!v.isList() || v.isTensorList()) return false;
  bool tensor = false;
  for (const c10::IValue& e : v.toListRef()) {
    if (e.isTensor()) {
      tensor = true;
    } else if (!e.isNone()) {
      return false;
    }
  }
  return tensor;
}

// `v` with `f` applied to each tensor it holds (a tensor, a list, a list of
// optional tensors); another value as it is.
template <typename F>
c10::IValue MapTensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> list = v.toTensorVector();
    for (at::Tensor& t : list) t = f(t);
    return list;
  }
  if (IsOptionalTensorListLike(v)) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : v.toListRef()) {
      list.push_back(e.isTensor() ? std::optional<at::Tensor>(f(e.toTensor())) : std::nullopt);
    }
    return list;
  }
  return v;
}

// Calls `f` on each tensor `v` holds (a tensor, a list of tensors or of
// optional tensors).
template <typename F>
void ForEachTensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) f(e.toTensor());
    }
  }
}

}  // namespace torch_neuron::lazy

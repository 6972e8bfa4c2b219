// Predicates over operator schema argument types, shared by the tracer, the CPU
// fallback and the lowering (`Tensor?` counts as Tensor, `int[]?` as a list...).
#pragma once

#include <ATen/core/jit_type.h>

namespace torch_neuron::runtime {

// The type inside an Optional, or the type itself.
inline c10::TypePtr Unwrapped(const c10::TypePtr& type) {
  if (auto opt = type->cast<c10::OptionalType>()) return opt->getElementType();
  return type;
}

inline bool IsTensorType(const c10::TypePtr& t) {
  return Unwrapped(t)->kind() == c10::TypeKind::TensorType;
}

inline bool IsGeneratorType(const c10::TypePtr& t) {
  return Unwrapped(t)->kind() == c10::TypeKind::GeneratorType;
}

// `Scalar` arguments (the schema's NumberType).
inline bool IsNumberType(const c10::TypePtr& t) {
  return Unwrapped(t)->kind() == c10::TypeKind::NumberType;
}

// A list (possibly optional) whose elements (possibly optional) are `element`.
inline bool IsListOf(const c10::TypePtr& t, c10::TypeKind element) {
  auto list = Unwrapped(t)->cast<c10::ListType>();
  return list && Unwrapped(list->getElementType())->kind() == element;
}

}  // namespace torch_neuron::runtime

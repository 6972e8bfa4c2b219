// Predicates over operator schema argument types, shared by the tracer, the CPU
// fallback and the lowering (`Tensor?` counts as Tensor, `int[]?` as a list...).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/jit_type.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace torch_neuron::ir {

// The type inside an Optional, or the type itself.
inline c10::TypePtr Unwrapped(const c10::TypePtr& type) {
  if (auto opt = type->cast<c10::OptionalType>()) return opt->getElementType();
  return type;
}

inline bool IsTensorType(const c10::TypePtr& t) { return Unwrapped(t)->kind() == c10::TypeKind::TensorType; }

inline bool IsGeneratorType(const c10::TypePtr& t) {
  return Unwrapped(t)->kind() == c10::TypeKind::GeneratorType;
}

// `Scalar` arguments (the schema's NumberType).
inline bool IsNumberType(const c10::TypePtr& t) { return Unwrapped(t)->kind() == c10::TypeKind::NumberType; }

// A list (possibly optional) whose elements (possibly optional) are `element`.
inline bool IsListOf(const c10::TypePtr& t, c10::TypeKind element) {
  auto list = Unwrapped(t)->cast<c10::ListType>();
  return list && Unwrapped(list->getElementType())->kind() == element;
}

// How a node's flat outputs map onto an operator's returns: per return, -1 for
// one value, or the length of a Tensor[] return. A node keeps its outputs flat
// (`(Tensor[] a, Tensor b)` of a 3-tensor list is 4 outputs). A list return
// named after a list argument (`exp_avgs_out` of `exp_avgs`: the functional
// forms of the _fused_ optimizer steps, whose max_exp_avg_sqs list is empty
// without amsgrad) has that argument's length, given per argument in
// `arg_list_lengths` (-1: not a list; empty: unknown). Otherwise every ATen op
// with several list returns gives them one length (the _foreach_ family), so
// the layout follows from the schema and the output count.
inline absl::StatusOr<std::vector<int32_t>> ReturnWidths(const c10::FunctionSchema& schema,
                                                         int64_t num_outputs,
                                                         const std::vector<int64_t>& arg_list_lengths = {}) {
  if (!arg_list_lengths.empty() && arg_list_lengths.size() == schema.arguments().size()) {
    std::vector<int32_t> widths;
    int64_t total = 0;
    for (const c10::Argument& ret : schema.returns()) {
      int64_t width = -1;  // a single value
      if (Unwrapped(ret.type())->kind() == c10::TypeKind::ListType) {
        width = -2;  // not found
        for (size_t a = 0; a < schema.arguments().size() && width == -2; ++a) {
          if (arg_list_lengths[a] >= 0 && ret.name() == schema.arguments()[a].name() + "_out") {
            width = arg_list_lengths[a];
          }
        }
        if (width == -2) break;
      }
      widths.push_back(static_cast<int32_t>(width));
      total += width < 0 ? 1 : width;
    }
    if (widths.size() == schema.returns().size() && total == num_outputs) return widths;
  }
  int64_t singles = 0;
  int64_t lists = 0;
  for (const c10::Argument& ret : schema.returns()) {
    (Unwrapped(ret.type())->kind() == c10::TypeKind::ListType ? lists : singles) += 1;
  }
  const int64_t listed = num_outputs - singles;
  if (listed < 0 || (lists == 0 && listed != 0) || (lists > 0 && listed % lists != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(schema.operator_name().name, " returns ", schema.returns().size(), " values (", lists,
                     " of them lists); ", num_outputs, " outputs do not divide among them"));
  }
  std::vector<int32_t> widths;
  for (const c10::Argument& ret : schema.returns()) {
    const bool list = Unwrapped(ret.type())->kind() == c10::TypeKind::ListType;
    widths.push_back(list ? static_cast<int32_t>(listed / lists) : -1);
  }
  return widths;
}

}  // namespace torch_neuron::ir

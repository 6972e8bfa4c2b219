// One macro family for propagating absl::Status through fallible code.
// Exceptions only appear at the ATen and pybind11 boundaries (see STYLE.md).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TN_STATUS_CONCAT_INNER_(a, b) a##b
#define TN_STATUS_CONCAT_(a, b) TN_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define TN_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status tn_status_ = (expr);      \
    if (!tn_status_.ok()) return tn_status_; \
  } while (0)

// `TN_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a StatusOr or returns its error.
#define TN_ASSIGN_OR_RETURN(lhs, expr) \
  TN_ASSIGN_OR_RETURN_IMPL_(TN_STATUS_CONCAT_(tn_statusor_, __LINE__), lhs, expr)
#define TN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

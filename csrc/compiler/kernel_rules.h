// The rules of generated kernels: how each ATen op a fused kernel may hold
// reads in float arithmetic, how each reduction combines, and how ops with
// bfloat16 or float16 results round. The code generator (kernel_codegen.cc)
// turns them into C++; the fusion pass asks kernel_codegen.h which ops they
// cover. Immutable tables: thread-safe.
#pragma once

#include <string>

#include <c10/core/ScalarType.h>

#include "absl/container/flat_hash_map.h"

namespace torch_neuron::compiler {

// How one ATen op reads in float arithmetic. `kinds` per operand: 'T' a tensor
// of the kernel's shape, 'S' a scalar, 'A' either. `expr` uses $0, $1, ... for
// the operands. Each formula follows the CPU kernel's (lerp's two branches,
// NaN propagation of relu/maximum), so results differ at most by rounding.
struct OpRule {
  std::string kinds;
  std::string expr;
  // Float, or Bool for a comparison (0 or 1, stored as bool), or a cast's target.
  c10::ScalarType result = c10::ScalarType::Float;
};

// Every elementwise op a kernel can compute, by schema name (casts as
// "aten::_to_copy[Dtype]").
const absl::flat_hash_map<std::string, OpRule>& OpRules();

// Row reductions: the identity and how two partial results combine ($0, $1).
// amax and amin propagate NaN, as ATen's do; mean divides the sum by the row
// length afterwards.
struct ReductionRule {
  std::string identity;
  std::string combine;
  bool mean = false;
};

const absl::flat_hash_map<std::string, ReductionRule>& ReductionRules();

// How ATen's CPU kernels read a scalar operand (a Python number, alpha) of an
// op with a bfloat16 or float16 result: add and sub round it to the result's
// dtype first; mul, div and the rest of the rules take it as a float. The
// rules left out compute otherwise (a fused multiply-add, another formula) and
// keep reduced-precision results as library calls.
bool RoundsScalars(const std::string& rule);
// Whether a kernel may compute `rule` in float and round its result once (the
// rules left out keep bfloat16 and float16 results as library calls).
bool RoundedResultRule(const std::string& rule);

}  // namespace torch_neuron::compiler

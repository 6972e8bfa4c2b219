#include "compiler/kernel_codegen.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "compiler/kernel_helpers.h"
#include "compiler/kernel_rules.h"
#include "ir/hash.h"
#include "base/dtypes.h"

namespace torch_neuron::compiler {
namespace {

// The C type of one element of `dtype` in a kernel's buffers (bfloat16 and
// float16: their bits).
const char* CType(c10::ScalarType dtype) {
  const DtypeFacts* facts = FactsOf(dtype);
  return facts != nullptr ? facts->kernel_c_type : nullptr;
}

std::string Substitute(const std::string& expr, const std::vector<std::string>& operands) {
  std::vector<std::pair<std::string, std::string>> subs;
  for (size_t i = 0; i < operands.size(); ++i) subs.emplace_back(absl::StrCat("$", i), operands[i]);
  return absl::StrReplaceAll(expr, subs);
}

// The kernel-local names of an op's operands: v<value> or s<scalar>.
std::vector<std::string> OperandNames(const FusedOp& op) {
  std::vector<std::string> names;
  for (const FusedOp::Operand& o : op.operands) {
    if (o.literal) {
      names.push_back(std::isfinite(*o.literal)
                          ? absl::StrFormat("static_cast<float>(%.17g)", *o.literal)
                          : absl::StrCat(std::isnan(*o.literal)
                                             ? "__builtin_nanf(\"\")"
                                             : (*o.literal > 0 ? "__builtin_inff()" : "-__builtin_inff()")));
    } else {
      names.push_back(o.scalar ? absl::StrCat("s", o.index) : absl::StrCat("v", o.index));
    }
  }
  return names;
}

// The helper that rounds a float to `dtype` (FusedOp::rounding), or null.
const char* RoundingHelper(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::BFloat16:
      return "tn_bf16_round";
    case c10::ScalarType::Half:
      return "tn_f16_round";
    default:
      return nullptr;
  }
}

std::string OpExpr(const FusedOp& op) {
  const char* round = RoundingHelper(op.rounding);
  std::vector<std::string> names = OperandNames(op);
  if (round == nullptr) return Substitute(OpRules().at(op.op).expr, names);
  for (size_t i = 0; i < names.size() && RoundsScalars(op.op); ++i) {
    if (op.operands[i].scalar || op.operands[i].literal) names[i] = absl::StrCat(round, "(", names[i], ")");
  }
  return absl::StrCat(round, "(", Substitute(OpRules().at(op.op).expr, names), ")");
}

// Input v's pointer at element `offset` ("in[0] + base"), declared as in<v>.
std::string InputPointer(const FusedKernel& k, int32_t v, const std::string& offset) {
  const std::string at = offset.empty() ? "" : absl::StrCat(" + ", offset);
  const char* type = CType(k.InputDtype(v));
  return absl::StrCat("const ", type, "* in", v, " = static_cast<const ", type, "*>(in[", v, "])", at, ";\n");
}

// The store of `value` into output i at `index`, converted to its dtype (a
// bool stores value != 0, an integer the truncated value). `pointer`, if given,
// names a local pointer to the output's elements (else out[i] is cast).
std::string OutputStore(const FusedKernel& k, size_t i, const std::string& index, const std::string& value,
                        const std::string& pointer = "") {
  const c10::ScalarType dtype = k.OutputDtype(static_cast<int32_t>(i));
  const char* type = CType(dtype);
  std::string converted;
  switch (dtype) {
    case c10::ScalarType::Float:
      converted = value;
      break;
    case c10::ScalarType::Bool:
      converted = absl::StrCat(value, " != 0.0f");
      break;
    case c10::ScalarType::BFloat16:
      converted = absl::StrCat("tn_bf16_bits(", value, ")");
      break;
    case c10::ScalarType::Half:
      converted = absl::StrCat("tn_f16_bits(", value, ")");
      break;
    default:
      converted = absl::StrCat("static_cast<", type, ">(", value, ")");
      break;
  }
  const std::string target =
      pointer.empty() ? absl::StrCat("static_cast<", type, "*>(out[", i, "])") : pointer;
  return absl::StrCat(target, "[", index, "] = ", converted);
}

// Input v's element `index` as a float32.
std::string InputLoad(const FusedKernel& k, int32_t v, const std::string& pointer, const std::string& index) {
  const std::string element = absl::StrCat(pointer, "[", index, "]");
  switch (k.InputDtype(v)) {
    case c10::ScalarType::Float:
      return element;
    case c10::ScalarType::BFloat16:
      return absl::StrCat("tn_bf16_load(", element, ")");
    case c10::ScalarType::Half:
      return absl::StrCat("tn_f16_load(", element, ")");
    default:
      return absl::StrCat("static_cast<float>(", element, ")");
  }
}

// The helper functions a kernel's formulas and conversions call: every
// formula of its ops, and the load or store of every input and output dtype.
std::string MathPreamble(const FusedKernel& k) {
  std::string calls;
  for (const FusedOp& op : k.ops) {
    if (!IsReduction(op.op)) absl::StrAppend(&calls, OpExpr(op));
  }
  for (int32_t v = 0; v < k.num_inputs; ++v) absl::StrAppend(&calls, InputLoad(k, v, "in", "0"));
  for (size_t i = 0; i < k.outputs.size(); ++i) absl::StrAppend(&calls, OutputStore(k, i, "0", "x"));
  return HelperSource(calls);
}

// The kernel's C signature, opening its body.
std::string Signature(const FusedKernel& k) {
  return absl::StrCat("extern \"C\" void ", k.name,
                      "(const void* const* in, void* const* out, const double* scalars,\n",
                      "    int64_t begin, int64_t end) {\n");
}

// The kernel's scalars as float locals s0, s1, ...
std::string ScalarLocals(const FusedKernel& k) {
  std::string out;
  for (int32_t i = 0; i < k.num_scalars; ++i) {
    absl::StrAppend(&out, "  const float s", i, " = static_cast<float>(scalars[", i, "]);\n");
  }
  return out;
}

constexpr int kLanes = 16;  // partial results per reduction

// The element values a loop over the row computes to produce `targets`:
// element ops and the element and column inputs they read, down to values held
// in `cached` row buffers (read, not recomputed). Row values are computed
// before the loop.
std::vector<bool> LoopValues(const FusedKernel& k, const std::vector<int32_t>& targets,
                             const std::vector<bool>& cached) {
  std::vector<bool> needed(k.num_inputs + k.ops.size(), false);
  std::vector<int32_t> stack(targets);
  while (!stack.empty()) {
    const int32_t v = stack.back();
    stack.pop_back();
    if (needed[v] || k.ExtentOf(v) == Extent::kRow || k.ExtentOf(v) == Extent::kOne) continue;
    needed[v] = true;
    if (v < k.num_inputs || cached[v]) continue;
    for (const FusedOp::Operand& o : k.ops[v - k.num_inputs].operands) {
      if (!o.scalar && !o.literal) stack.push_back(o.index);
    }
  }
  return needed;
}

// The statements of a loop over c (the position in the row) computing `targets`.
std::string ElementBody(const FusedKernel& k, const std::vector<int32_t>& targets,
                        const std::vector<bool>& cached, const std::string& indent) {
  const std::vector<bool> needed = LoopValues(k, targets, cached);
  std::string out;
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    if (needed[v])
      absl::StrAppend(&out, indent, "const float v", v, " = ", InputLoad(k, v, absl::StrCat("in", v), "c"),
                      ";\n");
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    const int32_t v = k.num_inputs + static_cast<int32_t>(i);
    if (!needed[v]) continue;
    if (cached[v]) {
      absl::StrAppend(&out, indent, "const float v", v, " = row", v, "[c];\n");
    } else {
      absl::StrAppend(&out, indent, "const float v", v, " = ", OpExpr(k.ops[i]), ";  // ", k.ops[i].op, "\n");
    }
  }
  return out;
}

// Longest row whose reduced values a row kernel keeps in a local buffer for
// later loops (softmax's exponentials) instead of recomputing them.
constexpr int64_t kMaxCachedRow = 8192;

std::string RowKernelBody(const FusedKernel& k) {
  const int32_t num_values = k.num_inputs + static_cast<int32_t>(k.ops.size());
  std::vector<int32_t> element_outputs;
  for (int32_t v : k.outputs) {
    if (k.ExtentOf(v) == Extent::kElement) element_outputs.push_back(v);
  }
  // Which reductions store the value they reduce in a row buffer: those whose
  // value a later loop would otherwise compute again.
  std::vector<bool> cached(num_values, false), stored(num_values, false);
  for (size_t i = 0; i < k.ops.size() && k.row_length <= kMaxCachedRow; ++i) {
    if (!IsReduction(k.ops[i].op)) continue;
    const int32_t operand = k.ops[i].operands[0].index;
    if (operand < k.num_inputs || cached[operand]) continue;
    std::vector<int32_t> later = element_outputs;
    for (size_t j = i + 1; j < k.ops.size(); ++j) {
      if (IsReduction(k.ops[j].op)) later.push_back(k.ops[j].operands[0].index);
    }
    if (LoopValues(k, later, cached)[operand]) stored[operand] = cached[operand] = true;
  }

  std::string out = absl::StrCat("  constexpr int64_t C = ", k.row_length, ";  // elements per row\n",
                                 "  constexpr int64_t kLanes = ", kLanes, ";\n", ScalarLocals(k));
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    if (k.input_extents[v] == Extent::kOne || k.input_extents[v] == Extent::kColumn) {
      absl::StrAppend(&out, "  ", InputPointer(k, v, ""));
    }
    if (k.input_extents[v] == Extent::kOne) {
      absl::StrAppend(&out, "  const float v", v, " = ", InputLoad(k, v, absl::StrCat("in", v), "0"), ";\n");
    }
  }
  for (int32_t v = 0; v < num_values; ++v) {
    if (stored[v])
      absl::StrAppend(&out, "  alignas(64) float row", v, "[C];  // v", v, " of the current row\n");
  }
  absl::StrAppend(&out, "  for (int64_t r = begin; r < end; ++r) {\n");
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    if (k.input_extents[v] == Extent::kElement) {
      absl::StrAppend(&out, "    ", InputPointer(k, v, "r * C"));
    } else if (k.input_extents[v] == Extent::kRow) {
      absl::StrAppend(&out, "    ", InputPointer(k, v, "r"), "    const float v", v, " = ",
                      InputLoad(k, v, absl::StrCat("in", v), "0"), ";\n");
    }
  }
  std::vector<bool> available(num_values, false);  // row buffers filled so far
  for (size_t i = 0; i < k.ops.size(); ++i) {
    const FusedOp& op = k.ops[i];
    const int32_t value = k.num_inputs + static_cast<int32_t>(i);
    if (op.extent != Extent::kRow) continue;  // element ops live in the loops
    if (!IsReduction(op.op)) {
      absl::StrAppend(&out, "    const float v", value, " = ", OpExpr(op), ";  // ", op.op, "\n");
      continue;
    }
    const ReductionRule& rule = ReductionRules().at(op.op);
    const std::string acc = absl::StrCat("acc", value);
    const int32_t operand = op.operands[0].index;
    const std::string x = absl::StrCat("v", operand);
    std::string body = ElementBody(k, {operand}, available, "        ");
    if (stored[operand] && !available[operand])
      absl::StrAppend(&body, "        row", operand, "[c] = ", x, ";\n");
    // Partial results per lane; amax/amin keep NaN apart in `nan` lanes, so
    // the compare-and-select stays one the loop vectorizer takes.
    const bool track_nan = op.op == "aten::amax" || op.op == "aten::amin";
    const std::string nan = absl::StrCat("nan", value);
    auto update = [&](const std::string& lane) {
      std::string u = absl::StrCat("        ", acc, "[", lane,
                                   "] = ", Substitute(rule.combine, {acc + "[" + lane + "]", x}), ";\n");
      if (track_nan)
        absl::StrAppend(&u, "        ", nan, "[", lane, "] = ", x, " != ", x, " ? ", x, " : ", nan, "[", lane,
                        "];\n");
      return u;
    };
    absl::StrAppend(&out, "    // ", op.op, " of v", operand, "\n", "    float ", acc, "[kLanes];\n",
                    "    for (int64_t j = 0; j < kLanes; ++j) ", acc, "[j] = ", rule.identity, ";\n");
    if (track_nan) {
      absl::StrAppend(&out, "    float ", nan, "[kLanes];\n", "    for (int64_t j = 0; j < kLanes; ++j) ",
                      nan, "[j] = 0.0f;\n");
    }
    absl::StrAppend(&out, "    int64_t c", value, " = 0;\n", "    for (; c", value, " + kLanes <= C; c",
                    value, " += kLanes) {\n",
                    // Not unrolled: the loop vectorizer then takes the lanes as
                    // one vector (unrolled, GCC often left them scalar).
                    "#pragma GCC unroll 1\n", "      for (int64_t j = 0; j < kLanes; ++j) {\n",
                    "        const int64_t c = c", value, " + j;\n", body, update("j"), "      }\n    }\n",
                    "    for (; c", value, " < C; ++c", value, ") {\n",
                    "      {\n        const int64_t c = c", value, ";\n", body, update("0"),
                    "      }\n    }\n", "    float v", value, " = ", acc, "[0];\n",
                    "    for (int64_t j = 1; j < kLanes; ++j) v", value, " = ",
                    Substitute(rule.combine, {absl::StrCat("v", value), acc + "[j]"}), ";\n");
    if (track_nan) {
      absl::StrAppend(&out, "    for (int64_t j = 0; j < kLanes; ++j) v", value, " = ", nan, "[j] != ", nan,
                      "[j] ? ", nan, "[j] : v", value, ";\n");
    }
    if (rule.mean) absl::StrAppend(&out, "    v", value, " = v", value, " / static_cast<float>(C);\n");
    if (stored[operand]) available[operand] = true;
  }
  if (!element_outputs.empty()) {
    absl::StrAppend(&out, "    for (int64_t c = 0; c < C; ++c) {\n",
                    ElementBody(k, element_outputs, available, "      "));
    for (size_t i = 0; i < k.outputs.size(); ++i) {
      if (k.ExtentOf(k.outputs[i]) == Extent::kElement) {
        absl::StrAppend(&out, "      ", OutputStore(k, i, "r * C + c", absl::StrCat("v", k.outputs[i])),
                        ";\n");
      }
    }
    absl::StrAppend(&out, "    }\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    if (k.ExtentOf(k.outputs[i]) == Extent::kRow) {
      absl::StrAppend(&out, "    ", OutputStore(k, i, "r", absl::StrCat("v", k.outputs[i])), ";\n");
    }
  }
  absl::StrAppend(&out, "  }\n");
  return out;
}

// A flat kernel's strided general path (see kernel_codegen.h): element i's
// multi-index is kept as the loop advances one run of the innermost dim at a
// time; each input's offset comes from its strides.
std::string StridedFlatKernel(const FusedKernel& k) {
  std::string out = absl::StrCat(
      "extern \"C\" void ", k.name, runtime::kernel_abi::kStridedSuffix,
      "(const void* const* in, void* const* out, const double* scalars,\n",
      "    int64_t begin, int64_t end, const int64_t* geometry) {\n", ScalarLocals(k),
      "  const int64_t rank = geometry[0];\n", "  const int64_t* size = geometry + 1;\n", "  int64_t index[",
      kMaxStridedRank, "];  // of element i\n", "  for (int64_t d = rank - 1, rest = begin; d >= 0; --d) {\n",
      "    index[d] = rest % size[d];\n", "    rest /= size[d];\n", "  }\n");
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    absl::StrAppend(&out, "  const int64_t* stride", v, " = geometry + 1 + rank * ", v + 1, ";\n");
  }
  absl::StrAppend(&out, "  for (int64_t i = begin; i < end;) {\n",
                  "    const int64_t left = size[rank - 1] - index[rank - 1];\n",
                  "    const int64_t n = left < end - i ? left : end - i;\n");
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    const char* type = CType(k.InputDtype(v));
    absl::StrAppend(&out, "    int64_t at", v, " = 0;\n", "    for (int64_t d = 0; d < rank; ++d) at", v,
                    " += index[d] * stride", v, "[d];\n", "    const ", type, "* in", v,
                    " = static_cast<const ", type, "*>(in[", v, "]) + at", v, ";\n", "    const int64_t step",
                    v, " = stride", v, "[rank - 1];\n");
  }
  absl::StrAppend(&out, "    for (int64_t j = 0; j < n; ++j) {\n");
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    absl::StrAppend(&out, "      const float v", v, " = ",
                    InputLoad(k, v, absl::StrCat("in", v), absl::StrCat("j * step", v)), ";\n");
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    absl::StrAppend(&out, "      const float v", k.num_inputs + i, " = ", OpExpr(k.ops[i]), ";  // ",
                    k.ops[i].op, "\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "      ", OutputStore(k, i, "i + j", absl::StrCat("v", k.outputs[i])), ";\n");
  }
  absl::StrAppend(&out, "    }\n", "    i += n;\n", "    index[rank - 1] += n;\n",
                  "    for (int64_t d = rank - 1; d > 0 && index[d] == size[d]; --d) {\n",
                  "      index[d] = 0;\n", "      ++index[d - 1];\n", "    }\n", "  }\n", "}\n");
  return out;
}

// Whether a reduction is amax or amin (a running extreme, not a sum).
bool IsExtremum(const std::string& op) { return op == "aten::amax" || op == "aten::amin"; }

// A column kernel (see kernel_codegen.h): begin and end count columns. Per
// block of kColumnBlock columns, the rows in order, in chunks of kColumnChunk
// whose partial sums are added to the block's sums. amax and amin keep one
// running value per column instead; a NaN, once met, stays.
std::string ColumnKernelBody(const FusedKernel& k) {
  const int32_t num_values = k.num_inputs + static_cast<int32_t>(k.ops.size());
  std::vector<int32_t> targets, sums;  // values the row loop computes; column reductions
  for (int32_t v : k.outputs) {
    if (k.ExtentOf(v) == Extent::kElement) targets.push_back(v);
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    if (k.ops[i].extent != Extent::kColumn) continue;
    sums.push_back(k.num_inputs + static_cast<int32_t>(i));
    targets.push_back(k.ops[i].operands[0].index);
  }
  std::string out = absl::StrCat("  constexpr int64_t R = ", k.rows, ";  // rows\n",
                                 "  constexpr int64_t C = ", k.row_length, ";  // elements per row\n",
                                 "  constexpr int64_t kBlock = ", kColumnBlock, ";\n",
                                 "  constexpr int64_t kChunk = ", kColumnChunk, ";\n", ScalarLocals(k));
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    if (k.input_extents[v] == Extent::kOne || k.input_extents[v] == Extent::kColumn) {
      absl::StrAppend(&out, "  ", InputPointer(k, v, ""));
    }
    if (k.input_extents[v] == Extent::kOne) {
      absl::StrAppend(&out, "  const float v", v, " = ", InputLoad(k, v, absl::StrCat("in", v), "0"), ";\n");
    }
  }
  auto op_of = [&](int32_t v) -> const FusedOp& { return k.ops[v - k.num_inputs]; };
  for (int32_t v : sums) {
    const std::string comment = absl::StrCat("  // ", op_of(v).op, " of v", op_of(v).operands[0].index, "\n");
    if (IsExtremum(op_of(v).op)) {
      absl::StrAppend(&out, "  alignas(64) float extreme", v, "[kBlock];", comment);
    } else {
      absl::StrAppend(&out, "  alignas(64) double sum", v, "[kBlock];", comment, "  alignas(64) float part",
                      v, "[kBlock];\n");
    }
  }
  absl::StrAppend(&out, "  for (int64_t c0 = begin; c0 < end; c0 += kBlock) {\n",
                  "    const int64_t n = end - c0 < kBlock ? end - c0 : kBlock;\n");
  for (int32_t v : sums) {
    absl::StrAppend(&out, "    for (int64_t j = 0; j < n; ++j) ",
                    IsExtremum(op_of(v).op)
                        ? absl::StrCat("extreme", v, "[j] = ", ReductionRules().at(op_of(v).op).identity)
                        : absl::StrCat("sum", v, "[j] = 0.0"),
                    ";\n");
  }
  absl::StrAppend(&out, "    for (int64_t r0 = 0; r0 < R; r0 += kChunk) {\n",
                  "      const int64_t r1 = R - r0 < kChunk ? R : r0 + kChunk;\n");
  for (int32_t v : sums) {
    if (!IsExtremum(op_of(v).op))
      absl::StrAppend(&out, "      for (int64_t j = 0; j < n; ++j) part", v, "[j] = 0.0f;\n");
  }
  absl::StrAppend(&out, "      for (int64_t r = r0; r < r1; ++r) {\n");
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    if (k.input_extents[v] == Extent::kElement) {
      absl::StrAppend(&out, "        ", InputPointer(k, v, "r * C"));
    } else if (k.input_extents[v] == Extent::kRow) {
      absl::StrAppend(&out, "        ", InputPointer(k, v, "r"), "        const float v", v, " = ",
                      InputLoad(k, v, absl::StrCat("in", v), "0"), ";\n");
    }
  }
  absl::StrAppend(&out, "        for (int64_t j = 0; j < n; ++j) {\n",
                  "          const int64_t c = c0 + j;\n",
                  ElementBody(k, targets, std::vector<bool>(num_values, false), "          "));
  for (int32_t v : sums) {
    const std::string x = absl::StrCat("v", op_of(v).operands[0].index);
    if (IsExtremum(op_of(v).op)) {
      const std::string e = absl::StrCat("extreme", v, "[j]");
      absl::StrAppend(&out, "          ", e, " = ", x, " != ", x, " ? ", x, " : ",
                      Substitute(ReductionRules().at(op_of(v).op).combine, {e, x}), ";\n");
    } else {
      absl::StrAppend(&out, "          part", v, "[j] += ", x, ";\n");
    }
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    if (k.ExtentOf(k.outputs[i]) == Extent::kElement) {
      absl::StrAppend(&out, "          ", OutputStore(k, i, "r * C + c", absl::StrCat("v", k.outputs[i])),
                      ";\n");
    }
  }
  absl::StrAppend(&out, "        }\n      }\n");
  for (int32_t v : sums) {
    if (!IsExtremum(op_of(v).op)) {
      absl::StrAppend(&out, "      for (int64_t j = 0; j < n; ++j) sum", v, "[j] += part", v, "[j];\n");
    }
  }
  absl::StrAppend(&out, "    }\n");
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const int32_t v = k.outputs[i];
    if (k.ExtentOf(v) != Extent::kColumn) continue;
    const bool mean = ReductionRules().at(op_of(v).op).mean;
    const std::string sum = absl::StrCat("static_cast<float>(sum", v, "[j])");
    const std::string value = IsExtremum(op_of(v).op) ? absl::StrCat("extreme", v, "[j]")
                              : mean                  ? absl::StrCat(sum, " / static_cast<float>(R)")
                                                      : sum;
    absl::StrAppend(&out, "    for (int64_t j = 0; j < n; ++j) ", OutputStore(k, i, "c0 + j", value), ";\n");
  }
  absl::StrAppend(&out, "  }\n");
  return out;
}

const char* ExtentName(Extent e) {
  switch (e) {
    case Extent::kElement:
      return "element";
    case Extent::kRow:
      return "row";
    case Extent::kColumn:
      return "column";
    case Extent::kOne:
      return "one";
  }
  return "?";
}

// Kernels whose generated source stands for the loop structure in CodegenId:
// a flat kernel, and a row kernel with every input extent, a kept row buffer,
// both NaN-tracking and plain reductions, and both kinds of output.
std::vector<FusedKernel> ProbeKernels() {
  using O = FusedOp::Operand;
  FusedKernel flat{
      "probe", 2,
      1,       {{"aten::add.Tensor", {O{false, 0}, O{false, 1}, O{true, 0}}}, {"aten::exp", {O{false, 2}}}},
      {2, 3},  0,
      {}};
  FusedKernel row{"probe",
                  4,
                  1,
                  {{"aten::mul.Tensor", {O{false, 0}, O{false, 2}}},                                  // v4
                   {"aten::amax", {O{false, 4}}, Extent::kRow},                                       // v5
                   {"aten::sub.Tensor", {O{false, 4}, O{false, 5}, O{true, 0}}},                      // v6
                   {"aten::exp", {O{false, 6}}},                                                      // v7
                   {"aten::sum.dim_IntList", {O{false, 7}}, Extent::kRow},                            // v8
                   {"aten::mean.dim", {O{false, 4}}, Extent::kRow},                                   // v9
                   {"aten::add.Scalar", {O{false, 9}, O{false, 0, 0.5}, O{false, 1}}, Extent::kRow},  // v10
                   {"aten::div.Tensor", {O{false, 7}, O{false, 8}}},                                  // v11
                   {"aten::mul.Tensor", {O{false, 11}, O{false, 3}}}},                                // v12
                  {12, 10},
                  33,
                  {Extent::kElement, Extent::kRow, Extent::kColumn, Extent::kOne}};
  // add.Scalar's alpha reads v1 (a row input) only to exercise a row operand.
  // Conversions: a bool, an int64 and a bfloat16 input, a cast to every
  // stored dtype.
  using c10::ScalarType;
  FusedKernel typed{"probe",
                    3,
                    0,
                    {{"aten::where.self", {O{false, 0}, O{false, 1}, O{false, 2}}},  // v3
                     {"aten::_to_copy[Long]", {O{false, 3}}},                        // v4
                     {"aten::_to_copy[BFloat16]", {O{false, 3}}},                    // v5
                     {"aten::_to_copy[Double]", {O{false, 3}}},                      // v6
                     {"aten::_to_copy[Int]", {O{false, 3}}},                         // v7
                     {"aten::_to_copy[Bool]", {O{false, 3}}}},                       // v8
                    {3, 4, 5, 6, 7, 8},
                    0,
                    {},
                    {ScalarType::Bool, ScalarType::Long, ScalarType::BFloat16},
                    {ScalarType::Float, ScalarType::Long, ScalarType::BFloat16, ScalarType::Double,
                     ScalarType::Int, ScalarType::Bool}};
  // A column kernel: every input extent, a sum and a mean over the rows, an
  // element output.
  FusedKernel column{"probe",
                     4,
                     1,
                     {{"aten::mul.Tensor", {O{false, 0}, O{false, 2}}},              // v4
                      {"aten::add.Tensor", {O{false, 4}, O{false, 1}, O{true, 0}}},  // v5
                      {"aten::sum.dim_IntList", {O{false, 5}}, Extent::kColumn},     // v6
                      {"aten::mul.Tensor", {O{false, 4}, O{false, 3}}},              // v7
                      {"aten::mean.dim", {O{false, 7}}, Extent::kColumn}},           // v8
                     {5, 6, 8},
                     40,
                     {Extent::kElement, Extent::kRow, Extent::kColumn, Extent::kOne}};
  column.rows = 300;
  // Results rounded to bfloat16 and float16, with a scalar read each way.
  FusedKernel reduced{
      "probe",
      1,
      1,
      {{"aten::add.Tensor",
        {O{false, 0}, O{true, 0}, O{false, 0, 1.0}},
        Extent::kElement,
        ScalarType::BFloat16},                                                                // v1
       {"aten::mul.Tensor", {O{false, 1}, O{true, 0}}, Extent::kElement, ScalarType::Half}},  // v2
      {1, 2},
      0,
      {},
      {ScalarType::BFloat16},
      {ScalarType::BFloat16, ScalarType::Half}};
  return {flat, row, typed, column, reduced};
}

}  // namespace

std::string CodegenId() {
  // The rules, the helpers and the source generated for the probe kernels: any
  // change to what codegen emits changes the id.
  std::vector<std::string> rules;
  for (const auto& [op, rule] : OpRules()) {
    rules.push_back(absl::StrCat(op, "=", rule.kinds, ":", rule.expr, ":", c10::toString(rule.result)));
  }
  for (const auto& [op, rule] : ReductionRules()) {
    rules.push_back(absl::StrCat(op, "=", rule.identity, ":", rule.combine, ":", rule.mean));
  }
  std::sort(rules.begin(), rules.end());
  std::string text = absl::StrCat("abi", runtime::kernel_abi::kVersion, ";", kKernelBlock, ";", kColumnBlock,
                                  ";", kMaxStridedRank, ";", absl::StrJoin(rules, ";"), AllHelperSource());
  for (const FusedKernel& probe : ProbeKernels()) absl::StrAppend(&text, KernelSource(probe));
  return ir::HashToHex(ir::Hash(text));
}

bool IsReduction(const std::string& op) { return ReductionRules().contains(op); }

c10::ScalarType ResultDtype(const std::string& op) {
  auto it = OpRules().find(op);
  return it != OpRules().end() ? it->second.result : c10::ScalarType::Float;
}

std::optional<std::string> CastRule(c10::ScalarType dtype) {
  std::string name = absl::StrCat("aten::_to_copy[", c10::toString(dtype), "]");
  if (!OpRules().contains(name)) return std::nullopt;
  return name;
}

bool KernelLoads(c10::ScalarType dtype) { return CType(dtype) != nullptr; }

bool RoundsTo(const std::string& rule, c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Float || (RoundingHelper(dtype) != nullptr && RoundedResultRule(rule));
}

bool ExactInFloat(c10::ScalarType dtype) {
  const DtypeFacts* facts = FactsOf(dtype);
  return facts != nullptr && facts->exact_in_float32;
}

bool CanGenerate(const std::string& op, const std::vector<bool>& operand_is_scalar) {
  auto it = OpRules().find(op);
  if (it == OpRules().end() || it->second.kinds.size() != operand_is_scalar.size()) return false;
  for (size_t i = 0; i < operand_is_scalar.size(); ++i) {
    const char kind = it->second.kinds[i];
    if (kind == 'T' && operand_is_scalar[i]) return false;
    if (kind == 'S' && !operand_is_scalar[i]) return false;
  }
  return true;
}

// The statements of a flat loop over i: the inputs' loads, then each op.
std::string FlatElementBody(const FusedKernel& k, const std::string& indent) {
  std::string out;
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    absl::StrAppend(&out, indent, "const float v", v, " = ", InputLoad(k, v, absl::StrCat("in", v), "i"),
                    ";\n");
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    absl::StrAppend(&out, indent, "const float v", k.num_inputs + i, " = ", OpExpr(k.ops[i]), ";  // ",
                    k.ops[i].op, "\n");
  }
  return out;
}

std::string AbiVersionSource() {
  return absl::StrCat("extern \"C\" const int ", runtime::kernel_abi::kVersionSymbol, " = ",
                      runtime::kernel_abi::kVersion, ";\n");
}

std::string KernelSource(const FusedKernel& k) {
  std::string out =
      absl::StrCat("// ", k.name, ": ", k.ops.size(), " ops, ", k.num_inputs, " inputs, ", k.outputs.size(),
                   " outputs\n#include <cmath>\n#include <cstdint>\n\n", MathPreamble(k));
  if (k.row_length > 0) {
    absl::StrAppend(&out, Signature(k), k.IsColumnKernel() ? ColumnKernelBody(k) : RowKernelBody(k), "}\n");
    return out;
  }
  // An output is a new buffer or, where the executor donates one, the very
  // buffer of an input (runtime/kernel_call.cc): outputs and inputs overlap
  // exactly or not at all. With no output on an input's buffer (the usual
  // case) one loop stores straight to the outputs through __restrict__
  // pointers. Otherwise the loop runs over blocks whose results go to local
  // arrays, then to the outputs: the locals alias nothing, so the compute loop
  // stays vectorizable without runtime alias checks.
  absl::StrAppend(&out, Signature(k), ScalarLocals(k));
  std::vector<std::string> distinct;  // "out[i] != in[v]" for every pair
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    for (int32_t v = 0; v < k.num_inputs; ++v)
      distinct.push_back(absl::StrCat("out[", i, "] != in[", v, "]"));
  }
  absl::StrAppend(
      &out, distinct.empty() ? "  {\n" : absl::StrCat("  if (", absl::StrJoin(distinct, " && "), ") {\n"));
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    const char* type = CType(k.InputDtype(v));
    absl::StrAppend(&out, "    const ", type, "* __restrict__ in", v, " = static_cast<const ", type, "*>(in[",
                    v, "]);\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const char* type = CType(k.OutputDtype(static_cast<int32_t>(i)));
    absl::StrAppend(&out, "    ", type, "* __restrict__ out", i, " = static_cast<", type, "*>(out[", i,
                    "]);\n");
  }
  absl::StrAppend(&out, "    for (int64_t i = begin; i < end; ++i) {\n", FlatElementBody(k, "      "));
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "      ",
                    OutputStore(k, i, "i", absl::StrCat("v", k.outputs[i]), absl::StrCat("out", i)), ";\n");
  }
  if (distinct.empty()) {  // no inputs
    absl::StrAppend(&out, "    }\n  }\n}\n\n", StridedFlatKernel(k));
    return out;
  }
  absl::StrAppend(&out, "    }\n    return;\n  }\n  constexpr int64_t kBlock = ", kKernelBlock, ";\n");
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "  alignas(64) float block", i, "[kBlock];\n");
  }
  absl::StrAppend(&out, "  for (int64_t base = begin; base < end; base += kBlock) {\n",
                  "    const int64_t n = end - base < kBlock ? end - base : kBlock;\n");
  for (int32_t i = 0; i < k.num_inputs; ++i) absl::StrAppend(&out, "    ", InputPointer(k, i, "base"));
  absl::StrAppend(&out, "    for (int64_t i = 0; i < n; ++i) {\n", FlatElementBody(k, "      "));
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "      block", i, "[i] = v", k.outputs[i], ";\n");
  }
  absl::StrAppend(&out, "    }\n");
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    if (k.OutputDtype(static_cast<int32_t>(i)) == c10::ScalarType::Float) {
      absl::StrAppend(&out, "    __builtin_memcpy(static_cast<float*>(out[", i, "]) + base, block", i,
                      ", n * sizeof(float));\n");
    } else {
      absl::StrAppend(&out, "    for (int64_t i = 0; i < n; ++i) ",
                      OutputStore(k, i, "base + i", absl::StrCat("block", i, "[i]")), ";\n");
    }
  }
  absl::StrAppend(&out, "  }\n}\n\n", StridedFlatKernel(k));
  return out;
}

std::string KernelSummary(const FusedKernel& k) {
  std::vector<std::string> lines;
  std::vector<std::string> typed;  // inputs and outputs not float32
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    const c10::ScalarType dtype = k.InputDtype(v);
    if (dtype != c10::ScalarType::Float) typed.push_back(absl::StrCat("v", v, " ", c10::toString(dtype)));
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const c10::ScalarType dtype = k.OutputDtype(static_cast<int32_t>(i));
    if (dtype != c10::ScalarType::Float) typed.push_back(absl::StrCat("out", i, " ", c10::toString(dtype)));
  }
  if (!typed.empty()) lines.push_back(absl::StrCat("dtypes (", absl::StrJoin(typed, ", "), ")"));
  if (k.row_length > 0) {
    std::vector<std::string> inputs;
    for (int32_t v = 0; v < k.num_inputs; ++v)
      inputs.push_back(absl::StrCat("v", v, " ", ExtentName(k.input_extents[v])));
    lines.push_back(k.IsColumnKernel()
                        ? absl::StrCat("columns of ", k.rows, " rows of ", k.row_length, " (",
                                       absl::StrJoin(inputs, ", "), ")")
                        : absl::StrCat("rows of ", k.row_length, " (", absl::StrJoin(inputs, ", "), ")"));
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    lines.push_back(absl::StrCat("v", k.num_inputs + i, " = ", k.ops[i].op, "(",
                                 absl::StrJoin(OperandNames(k.ops[i]), ", "), ")",
                                 k.ops[i].extent == Extent::kRow      ? " [row]"
                                 : k.ops[i].extent == Extent::kColumn ? " [column]"
                                                                      : "",
                                 k.ops[i].rounding == c10::ScalarType::Float
                                     ? ""
                                     : absl::StrCat(" [", c10::toString(k.ops[i].rounding), "]")));
  }
  std::vector<std::string> outs;
  for (int32_t v : k.outputs) outs.push_back(absl::StrCat("v", v));
  lines.push_back(absl::StrCat("store (", absl::StrJoin(outs, ", "), ")"));
  return absl::StrJoin(lines, "; ");
}

}  // namespace torch_neuron::compiler

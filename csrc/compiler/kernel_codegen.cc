#include "compiler/kernel_codegen.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "ir/hash.h"

namespace torch_neuron::compiler {
namespace {

// How one ATen op reads in float arithmetic. `kinds` per operand: 'T' a tensor
// of the kernel's shape, 'S' a scalar, 'A' either. `expr` uses $0, $1, ... for
// the operands. Each formula follows the CPU kernel's (lerp's two branches,
// NaN propagation of relu/maximum), so results differ at most by rounding.
struct OpRule {
  std::string kinds;
  std::string expr;
  bool bool_result = false;  // a comparison: 0 or 1, stored as bool
};

const absl::flat_hash_map<std::string, OpRule>& Rules() {
  static const auto* rules = new absl::flat_hash_map<std::string, OpRule>{
      {"aten::add.Tensor", {"TAS", "($0 + $2 * $1)"}},
      {"aten::sub.Tensor", {"TAS", "($0 - $2 * $1)"}},
      {"aten::mul.Tensor", {"TA", "($0 * $1)"}},
      {"aten::div.Tensor", {"TA", "($0 / $1)"}},
      {"aten::add.Scalar", {"TSS", "($0 + $2 * $1)"}},
      {"aten::sub.Scalar", {"TSS", "($0 - $2 * $1)"}},
      {"aten::mul.Scalar", {"TS", "($0 * $1)"}},
      {"aten::div.Scalar", {"TS", "($0 / $1)"}},
      {"aten::neg", {"T", "(-$0)"}},
      {"aten::exp", {"T", "tn_exp($0)"}},
      {"aten::log", {"T", "std::log($0)"}},
      {"aten::tanh", {"T", "tn_tanh($0)"}},
      {"aten::sigmoid", {"T", "(1.0f / (1.0f + tn_exp(-$0)))"}},
      {"aten::relu", {"T", "(($0 != $0 || $0 > 0.0f) ? $0 : 0.0f)"}},
      {"aten::sqrt", {"T", "std::sqrt($0)"}},
      {"aten::rsqrt", {"T", "(1.0f / std::sqrt($0))"}},
      {"aten::abs", {"T", "std::fabs($0)"}},
      {"aten::reciprocal", {"T", "(1.0f / $0)"}},
      {"aten::pow.Tensor_Scalar", {"TS", "std::pow($0, $1)"}},
      {"aten::threshold_backward", {"TTS", "($1 <= $2 ? 0.0f : $0)"}},
      {"aten::tanh_backward", {"TT", "($0 * (1.0f - $1 * $1))"}},
      {"aten::sigmoid_backward", {"TT", "($0 * (1.0f - $1) * $1)"}},
      {"aten::maximum", {"TT", "($0 != $0 ? $0 : ($1 != $1 ? $1 : ($0 > $1 ? $0 : $1)))"}},
      {"aten::minimum", {"TT", "($0 != $0 ? $0 : ($1 != $1 ? $1 : ($0 < $1 ? $0 : $1)))"}},
      {"aten::lerp.Scalar", {"TTS", "($2 < 0.5f ? $0 + $2 * ($1 - $0) : $1 - ($1 - $0) * (1.0f - $2))"}},
      {"aten::addcmul", {"TTTS", "($0 + $3 * $1 * $2)"}},
      {"aten::addcdiv", {"TTTS", "($0 + $3 * ($1 / $2))"}},
      // Comparisons and masks: bool values are 0 or 1 inside a kernel.
      {"aten::gt.Scalar", {"TS", "($0 > $1 ? 1.0f : 0.0f)", true}},
      {"aten::lt.Scalar", {"TS", "($0 < $1 ? 1.0f : 0.0f)", true}},
      {"aten::ge.Scalar", {"TS", "($0 >= $1 ? 1.0f : 0.0f)", true}},
      {"aten::le.Scalar", {"TS", "($0 <= $1 ? 1.0f : 0.0f)", true}},
      {"aten::eq.Scalar", {"TS", "($0 == $1 ? 1.0f : 0.0f)", true}},
      {"aten::ne.Scalar", {"TS", "($0 != $1 ? 1.0f : 0.0f)", true}},
      {"aten::gt.Tensor", {"TT", "($0 > $1 ? 1.0f : 0.0f)", true}},
      {"aten::lt.Tensor", {"TT", "($0 < $1 ? 1.0f : 0.0f)", true}},
      {"aten::ge.Tensor", {"TT", "($0 >= $1 ? 1.0f : 0.0f)", true}},
      {"aten::le.Tensor", {"TT", "($0 <= $1 ? 1.0f : 0.0f)", true}},
      {"aten::eq.Tensor", {"TT", "($0 == $1 ? 1.0f : 0.0f)", true}},
      {"aten::ne.Tensor", {"TT", "($0 != $1 ? 1.0f : 0.0f)", true}},
      {"aten::logical_not", {"T", "($0 != 0.0f ? 0.0f : 1.0f)", true}},
      {"aten::bitwise_not", {"T", "($0 != 0.0f ? 0.0f : 1.0f)", true}},  // of bool only: a bool result
      {"aten::where.self", {"TTT", "($0 != 0.0f ? $1 : $2)"}},
      {"aten::masked_fill.Scalar", {"TTS", "($1 != 0.0f ? $2 : $0)"}},
      {"aten::native_dropout_backward", {"TTS", "($0 * $1 * $2)"}},
      // GELU: an op's string attribute is part of its rule name. erf is
      // Abramowitz-Stegun 7.1.26, as ATen's vectorized CPU kernel computes it.
      {"aten::gelu[none]", {"T", "($0 * 0.5f * (1.0f + tn_erf($0 * 0.70710678118654752f)))"}},
      {"aten::gelu[tanh]",
       {"T", "(0.5f * $0 * (1.0f + tn_tanh(0.79788456080286536f * ($0 + 0.044715f * $0 * $0 * $0))))"}},
      {"aten::gelu_backward[none]",
       {"TT", "($0 * (0.5f * (1.0f + tn_erf($1 * 0.70710678118654752f)) + "
              "$1 * tn_exp(-0.5f * $1 * $1) * 0.39894228040143268f))"}},
      {"aten::gelu_backward[tanh]",
       {"TT", "($0 * (0.5f * (1.0f + tn_tanh(0.79788456080286536f * ($1 + 0.044715f * $1 * $1 * $1))) + "
              "0.5f * $1 * (1.0f - tn_tanh(0.79788456080286536f * ($1 + 0.044715f * $1 * $1 * $1)) * "
              "tn_tanh(0.79788456080286536f * ($1 + 0.044715f * $1 * $1 * $1))) * "
              "0.79788456080286536f * (1.0f + 3.0f * 0.044715f * $1 * $1)))"}},
  };
  return *rules;
}

// Row reductions: the identity and how two partial results combine ($0, $1).
// amax and amin propagate NaN, as ATen's do; mean divides the sum by the row
// length afterwards.
struct ReductionRule {
  std::string identity;
  std::string combine;
  bool mean = false;
};

const absl::flat_hash_map<std::string, ReductionRule>& ReductionRules() {
  static const auto* rules = new absl::flat_hash_map<std::string, ReductionRule>{
      {"aten::sum.dim_IntList", {"0.0f", "($0 + $1)", false}},
      {"aten::mean.dim", {"0.0f", "($0 + $1)", true}},
      // A plain compare and select, which vectorizes; the kernel tracks NaN
      // apart (see RowKernelBody), and combines lanes with the same formula.
      {"aten::amax", {"-__builtin_inff()", "($1 > $0 ? $1 : $0)", false}},
      {"aten::amin", {"__builtin_inff()", "($1 < $0 ? $1 : $0)", false}},
  };
  return *rules;
}

// Vectorizable float exp and tanh for generated kernels. libm's expf is a call
// the loop vectorizer cannot widen, which left a kernel with one exp at 6% of the
// copy bandwidth; these are straight-line code (selects, FMAs, integer shifts),
// so the loop stays vectorized. Accuracy against a double reference over
// [-120, 120]: exp and sigmoid within 1.5e-7 relative, tanh within 3e-7 (ATen's
// Sleef kernels are within 1 ulp). exp flushes results under about 2e-38 (x
// below about -87) to zero.
constexpr char kExpSource[] = R"(static inline float tn_exp(float x) {
  // exp(x) = 2^n * e^r with n = round(x / ln 2), |r| <= ln(2) / 2 (Cody-Waite).
  // The clamps keep NaN (a false compare keeps x); past 89 the result overflows
  // to inf, below -87.3 the scale's exponent field is 0 and the result 0.
  float xc = x < -87.3f ? -87.3f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = __builtin_fmaf(xc, 1.44269504088896341f, magic);
  const float n = t - magic;
  float r = __builtin_fmaf(n, -0.693359375f, xc);
  r = __builtin_fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r * r, r + 1.0f);
  int32_t bits;
  __builtin_memcpy(&bits, &t, 4);  // t's low mantissa bits hold n
  bits = (bits - (0x4B400000 - 126)) << 23;  // 2^(n-1), so n = 128 still fits
  float scale;
  __builtin_memcpy(&scale, &bits, 4);
  return (p + p) * scale;
}
)";

constexpr char kTanhSource[] = R"(static inline float tn_tanh(float x) {
  // (1 - e) / (1 + e) with e = exp(-2|x|); below |x| = 0.25, where 1 - e would
  // cancel, the Taylor series to x^9.
  const float a = __builtin_fabsf(x);
  const float e = tn_exp(-2.0f * a);
  const float large = (1.0f - e) / (1.0f + e);
  const float x2 = x * x;
  float p = 62.0f / 2835.0f;
  p = __builtin_fmaf(p, x2, -17.0f / 315.0f);
  p = __builtin_fmaf(p, x2, 2.0f / 15.0f);
  p = __builtin_fmaf(p, x2, -1.0f / 3.0f);
  const float small = __builtin_fmaf(p * x2, a, a);
  const float r = a < 0.25f ? small : large;
  return x != x ? x : __builtin_copysignf(r, x);
}
)";

constexpr char kErfSource[] = R"(static inline float tn_erf(float x) {
  // Abramowitz and Stegun 7.1.26: absolute error under 1.5e-7.
  const float a = __builtin_fabsf(x);
  const float t = 1.0f / __builtin_fmaf(0.3275911f, a, 1.0f);
  float p = 1.061405429f;
  p = __builtin_fmaf(p, t, -1.453152027f);
  p = __builtin_fmaf(p, t, 1.421413741f);
  p = __builtin_fmaf(p, t, -0.284496736f);
  p = __builtin_fmaf(p, t, 0.254829592f);
  const float r = 1.0f - p * t * tn_exp(-a * a);
  return x != x ? x : __builtin_copysignf(r, x);
}
)";

// The helper functions a kernel's formulas call, in dependency order.
std::string MathPreamble(const FusedKernel& k) {
  bool exp = false, tanh = false, erf = false;
  for (const FusedOp& op : k.ops) {
    if (IsRowReduction(op.op)) continue;
    const std::string& expr = Rules().at(op.op).expr;
    tanh |= expr.find("tn_tanh(") != std::string::npos;
    erf |= expr.find("tn_erf(") != std::string::npos;
    exp |= tanh || erf || expr.find("tn_exp(") != std::string::npos;
  }
  std::string out;
  if (exp) absl::StrAppend(&out, kExpSource, "\n");
  if (tanh) absl::StrAppend(&out, kTanhSource, "\n");
  if (erf) absl::StrAppend(&out, kErfSource, "\n");
  return out;
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
                          : absl::StrCat(std::isnan(*o.literal) ? "__builtin_nanf(\"\")"
                                                                : (*o.literal > 0 ? "__builtin_inff()"
                                                                                  : "-__builtin_inff()")));
    } else {
      names.push_back(o.scalar ? absl::StrCat("s", o.index) : absl::StrCat("v", o.index));
    }
  }
  return names;
}

std::string OpExpr(const FusedOp& op) { return Substitute(Rules().at(op.op).expr, OperandNames(op)); }

// Input v's pointer at element `offset` ("in[0] + base"), declared as in<v>.
std::string InputPointer(const FusedKernel& k, int32_t v, const std::string& offset) {
  const std::string at = offset.empty() ? "" : absl::StrCat(" + ", offset);
  if (k.IsBoolInput(v)) {
    return absl::StrCat("const bool* in", v, " = reinterpret_cast<const bool*>(in[", v, "])", at, ";\n");
  }
  return absl::StrCat("const float* in", v, " = in[", v, "]", at, ";\n");
}

// The store of output i's value at `index` (a bool output stores value != 0).
std::string OutputStore(const FusedKernel& k, size_t i, const std::string& index) {
  const std::string value = absl::StrCat("v", k.outputs[i]);
  return k.IsBoolOutput(static_cast<int32_t>(i))
             ? absl::StrCat("reinterpret_cast<bool*>(out[", i, "])[", index, "] = ", value, " != 0.0f")
             : absl::StrCat("out[", i, "][", index, "] = ", value);
}

// Input v's element `index` as a float (a bool reads as 0 or 1).
std::string InputLoad(const FusedKernel& k, int32_t v, const std::string& pointer, const std::string& index) {
  return k.IsBoolInput(v) ? absl::StrCat("static_cast<float>(", pointer, "[", index, "])")
                          : absl::StrCat(pointer, "[", index, "]");
}

// The kernel's C signature, opening its body.
std::string Signature(const FusedKernel& k) {
  return absl::StrCat("extern \"C\" void ", k.name,
                      "(const float* const* in, float* const* out, const double* scalars,\n",
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
std::string ElementBody(const FusedKernel& k, const std::vector<int32_t>& targets, const std::vector<bool>& cached,
                        const std::string& indent) {
  const std::vector<bool> needed = LoopValues(k, targets, cached);
  std::string out;
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    if (needed[v]) absl::StrAppend(&out, indent, "const float v", v, " = ", InputLoad(k, v, absl::StrCat("in", v), "c"), ";\n");
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
    if (!IsRowReduction(k.ops[i].op)) continue;
    const int32_t operand = k.ops[i].operands[0].index;
    if (operand < k.num_inputs || cached[operand]) continue;
    std::vector<int32_t> later = element_outputs;
    for (size_t j = i + 1; j < k.ops.size(); ++j) {
      if (IsRowReduction(k.ops[j].op)) later.push_back(k.ops[j].operands[0].index);
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
    if (stored[v]) absl::StrAppend(&out, "  alignas(64) float row", v, "[C];  // v", v, " of the current row\n");
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
    if (!IsRowReduction(op.op)) {
      absl::StrAppend(&out, "    const float v", value, " = ", OpExpr(op), ";  // ", op.op, "\n");
      continue;
    }
    const ReductionRule& rule = ReductionRules().at(op.op);
    const std::string acc = absl::StrCat("acc", value);
    const int32_t operand = op.operands[0].index;
    const std::string x = absl::StrCat("v", operand);
    std::string body = ElementBody(k, {operand}, available, "        ");
    if (stored[operand] && !available[operand]) absl::StrAppend(&body, "        row", operand, "[c] = ", x, ";\n");
    // Partial results per lane; amax/amin keep NaN apart in `nan` lanes, so
    // the compare-and-select stays one the loop vectorizer takes.
    const bool track_nan = op.op == "aten::amax" || op.op == "aten::amin";
    const std::string nan = absl::StrCat("nan", value);
    auto update = [&](const std::string& lane) {
      std::string u = absl::StrCat("        ", acc, "[", lane, "] = ", Substitute(rule.combine, {acc + "[" + lane + "]", x}), ";\n");
      if (track_nan) absl::StrAppend(&u, "        ", nan, "[", lane, "] = ", x, " != ", x, " ? ", x, " : ", nan, "[", lane, "];\n");
      return u;
    };
    absl::StrAppend(&out, "    // ", op.op, " of v", operand, "\n",
                    "    float ", acc, "[kLanes];\n",
                    "    for (int64_t j = 0; j < kLanes; ++j) ", acc, "[j] = ", rule.identity, ";\n");
    if (track_nan) {
      absl::StrAppend(&out, "    float ", nan, "[kLanes];\n",
                      "    for (int64_t j = 0; j < kLanes; ++j) ", nan, "[j] = 0.0f;\n");
    }
    absl::StrAppend(&out, "    int64_t c", value, " = 0;\n",
                    "    for (; c", value, " + kLanes <= C; c", value, " += kLanes) {\n",
                    // Not unrolled: the loop vectorizer then takes the lanes as
                    // one vector (unrolled, GCC often left them scalar).
                    "#pragma GCC unroll 1\n",
                    "      for (int64_t j = 0; j < kLanes; ++j) {\n",
                    "        const int64_t c = c", value, " + j;\n", body, update("j"),
                    "      }\n    }\n",
                    "    for (; c", value, " < C; ++c", value, ") {\n",
                    "      {\n        const int64_t c = c", value, ";\n", body, update("0"), "      }\n    }\n",
                    "    float v", value, " = ", acc, "[0];\n",
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
    absl::StrAppend(&out, "    for (int64_t c = 0; c < C; ++c) {\n", ElementBody(k, element_outputs, available, "      "));
    for (size_t i = 0; i < k.outputs.size(); ++i) {
      if (k.ExtentOf(k.outputs[i]) == Extent::kElement) {
        absl::StrAppend(&out, "      ", OutputStore(k, i, "r * C + c"), ";\n");
      }
    }
    absl::StrAppend(&out, "    }\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    if (k.ExtentOf(k.outputs[i]) == Extent::kRow) absl::StrAppend(&out, "    ", OutputStore(k, i, "r"), ";\n");
  }
  absl::StrAppend(&out, "  }\n");
  return out;
}

const char* ExtentName(Extent e) {
  switch (e) {
    case Extent::kElement: return "element";
    case Extent::kRow: return "row";
    case Extent::kColumn: return "column";
    case Extent::kOne: return "one";
  }
  return "?";
}

// Kernels whose generated source stands for the loop structure in CodegenId:
// a flat kernel, and a row kernel with every input extent, a kept row buffer,
// both NaN-tracking and plain reductions, and both kinds of output.
std::vector<FusedKernel> ProbeKernels() {
  using O = FusedOp::Operand;
  FusedKernel flat{"probe", 2, 1, {{"aten::add.Tensor", {O{false, 0}, O{false, 1}, O{true, 0}}},
                                  {"aten::exp", {O{false, 2}}}}, {2, 3}, 0, {}};
  FusedKernel row{"probe", 4, 1,
                  {{"aten::mul.Tensor", {O{false, 0}, O{false, 2}}},              // v4
                   {"aten::amax", {O{false, 4}}, Extent::kRow},                    // v5
                   {"aten::sub.Tensor", {O{false, 4}, O{false, 5}, O{true, 0}}},  // v6
                   {"aten::exp", {O{false, 6}}},                                   // v7
                   {"aten::sum.dim_IntList", {O{false, 7}}, Extent::kRow},         // v8
                   {"aten::mean.dim", {O{false, 4}}, Extent::kRow},                // v9
                   {"aten::add.Scalar", {O{false, 9}, O{false, 0, 0.5}, O{false, 1}}, Extent::kRow},  // v10
                   {"aten::div.Tensor", {O{false, 7}, O{false, 8}}},               // v11
                   {"aten::mul.Tensor", {O{false, 11}, O{false, 3}}}},             // v12
                  {12, 10},
                  33,
                  {Extent::kElement, Extent::kRow, Extent::kColumn, Extent::kOne}};
  // add.Scalar's alpha reads v1 (a row input) only to exercise a row operand.
  return {flat, row};
}

}  // namespace

std::string CodegenId() {
  // The rules, the helpers and the source generated for the probe kernels: any
  // change to what codegen emits changes the id.
  std::vector<std::string> rules;
  for (const auto& [op, rule] : Rules()) {
    rules.push_back(absl::StrCat(op, "=", rule.kinds, ":", rule.expr, ":", rule.bool_result));
  }
  for (const auto& [op, rule] : ReductionRules()) {
    rules.push_back(absl::StrCat(op, "=", rule.identity, ":", rule.combine, ":", rule.mean));
  }
  std::sort(rules.begin(), rules.end());
  std::string text =
      absl::StrCat(kKernelBlock, ";", absl::StrJoin(rules, ";"), kExpSource, kTanhSource, kErfSource);
  for (const FusedKernel& probe : ProbeKernels()) absl::StrAppend(&text, KernelSource(probe));
  return ir::HashToHex(ir::Hash(text));
}

bool IsRowReduction(const std::string& op) { return ReductionRules().contains(op); }

bool YieldsBool(const std::string& op) {
  auto it = Rules().find(op);
  return it != Rules().end() && it->second.bool_result;
}

bool CanGenerate(const std::string& op, const std::vector<bool>& operand_is_scalar) {
  auto it = Rules().find(op);
  if (it == Rules().end() || it->second.kinds.size() != operand_is_scalar.size()) return false;
  for (size_t i = 0; i < operand_is_scalar.size(); ++i) {
    const char kind = it->second.kinds[i];
    if (kind == 'T' && operand_is_scalar[i]) return false;
    if (kind == 'S' && !operand_is_scalar[i]) return false;
  }
  return true;
}

std::string KernelSource(const FusedKernel& k) {
  std::string out = absl::StrCat("// ", k.name, ": ", k.ops.size(), " ops, ", k.num_inputs, " inputs, ", k.outputs.size(),
                                 " outputs\n#include <cmath>\n#include <cstdint>\n\n",
                                 MathPreamble(k));
  if (k.row_length > 0) {
    absl::StrAppend(&out, Signature(k), RowKernelBody(k), "}\n");
    return out;
  }
  // The loop runs over blocks: each block's results go to local arrays, then to
  // the outputs. An output may be written into the buffer of an input the
  // execution no longer needs (a donated parameter), so inputs and outputs may
  // alias; no pointer is __restrict__, and the locals, which alias nothing, keep
  // the compute loop vectorizable without runtime alias checks.
  absl::StrAppend(&out, Signature(k), "  constexpr int64_t kBlock = ", kKernelBlock, ";\n", ScalarLocals(k));
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "  alignas(64) float block", i, "[kBlock];\n");
  }
  absl::StrAppend(&out, "  for (int64_t base = begin; base < end; base += kBlock) {\n",
                  "    const int64_t n = end - base < kBlock ? end - base : kBlock;\n");
  for (int32_t i = 0; i < k.num_inputs; ++i) absl::StrAppend(&out, "    ", InputPointer(k, i, "base"));
  absl::StrAppend(&out, "    for (int64_t i = 0; i < n; ++i) {\n");
  for (int32_t i = 0; i < k.num_inputs; ++i) {
    absl::StrAppend(&out, "      const float v", i, " = ", InputLoad(k, i, absl::StrCat("in", i), "i"), ";\n");
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    const FusedOp& op = k.ops[i];
    absl::StrAppend(&out, "      const float v", k.num_inputs + i, " = ", OpExpr(op), ";  // ", op.op, "\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "      block", i, "[i] = v", k.outputs[i], ";\n");
  }
  absl::StrAppend(&out, "    }\n");
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    if (k.IsBoolOutput(static_cast<int32_t>(i))) {
      absl::StrAppend(&out, "    for (int64_t i = 0; i < n; ++i) reinterpret_cast<bool*>(out[", i,
                      "])[base + i] = block", i, "[i] != 0.0f;\n");
    } else {
      absl::StrAppend(&out, "    __builtin_memcpy(out[", i, "] + base, block", i, ", n * sizeof(float));\n");
    }
  }
  absl::StrAppend(&out, "  }\n}\n");
  return out;
}

std::string KernelSummary(const FusedKernel& k) {
  std::vector<std::string> lines;
  std::vector<std::string> bools;
  for (int32_t v = 0; v < k.num_inputs; ++v) {
    if (k.IsBoolInput(v)) bools.push_back(absl::StrCat("v", v));
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    if (k.IsBoolOutput(static_cast<int32_t>(i))) bools.push_back(absl::StrCat("out", i));
  }
  if (!bools.empty()) lines.push_back(absl::StrCat("bool (", absl::StrJoin(bools, ", "), ")"));
  if (k.row_length > 0) {
    std::vector<std::string> inputs;
    for (int32_t v = 0; v < k.num_inputs; ++v) inputs.push_back(absl::StrCat("v", v, " ", ExtentName(k.input_extents[v])));
    lines.push_back(absl::StrCat("rows of ", k.row_length, " (", absl::StrJoin(inputs, ", "), ")"));
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    lines.push_back(absl::StrCat("v", k.num_inputs + i, " = ", k.ops[i].op, "(",
                                 absl::StrJoin(OperandNames(k.ops[i]), ", "), ")",
                                 k.ops[i].extent == Extent::kRow ? " [row]" : ""));
  }
  std::vector<std::string> outs;
  for (int32_t v : k.outputs) outs.push_back(absl::StrCat("v", v));
  lines.push_back(absl::StrCat("store (", absl::StrJoin(outs, ", "), ")"));
  return absl::StrJoin(lines, "; ");
}

}  // namespace torch_neuron::compiler

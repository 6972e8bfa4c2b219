#include "compiler/kernel_codegen.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
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

// The helper functions a kernel's formulas call, in dependency order.
std::string MathPreamble(const FusedKernel& k) {
  bool exp = false, tanh = false;
  for (const FusedOp& op : k.ops) {
    const std::string& expr = Rules().at(op.op).expr;
    tanh |= expr.find("tn_tanh(") != std::string::npos;
    exp |= tanh || expr.find("tn_exp(") != std::string::npos;
  }
  std::string out;
  if (exp) absl::StrAppend(&out, kExpSource, "\n");
  if (tanh) absl::StrAppend(&out, kTanhSource, "\n");
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
    names.push_back(o.scalar ? absl::StrCat("s", o.index) : absl::StrCat("v", o.index));
  }
  return names;
}

}  // namespace

std::string CodegenId() {
  constexpr int kCodegenRevision = 2;  // 2: blocked loops, no __restrict__
  std::vector<std::string> rules;
  for (const auto& [op, rule] : Rules()) rules.push_back(absl::StrCat(op, "=", rule.kinds, ":", rule.expr));
  std::sort(rules.begin(), rules.end());
  const std::string text = absl::StrCat(kCodegenRevision, ";", kKernelBlock, ";", absl::StrJoin(rules, ";"),
                                        kExpSource, kTanhSource);
  return ir::HashToHex(ir::Hash(text));
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
  // The loop runs over blocks: each block's results go to local arrays, then to
  // the outputs. An output may be written into the buffer of an input the
  // execution no longer needs (a donated parameter), so inputs and outputs may
  // alias; no pointer is __restrict__, and the locals, which alias nothing, keep
  // the compute loop vectorizable without runtime alias checks.
  absl::StrAppend(&out, "extern \"C\" void ", k.name,
                  "(const float* const* in, float* const* out, const double* scalars,\n",
                  "    int64_t begin, int64_t end) {\n",
                  "  constexpr int64_t kBlock = ", kKernelBlock, ";\n");
  for (int32_t i = 0; i < k.num_scalars; ++i) {
    absl::StrAppend(&out, "  const float s", i, " = static_cast<float>(scalars[", i, "]);\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "  alignas(64) float block", i, "[kBlock];\n");
  }
  absl::StrAppend(&out, "  for (int64_t base = begin; base < end; base += kBlock) {\n",
                  "    const int64_t n = end - base < kBlock ? end - base : kBlock;\n");
  for (int32_t i = 0; i < k.num_inputs; ++i) {
    absl::StrAppend(&out, "    const float* in", i, " = in[", i, "] + base;\n");
  }
  absl::StrAppend(&out, "    for (int64_t i = 0; i < n; ++i) {\n");
  for (int32_t i = 0; i < k.num_inputs; ++i) {
    absl::StrAppend(&out, "      const float v", i, " = in", i, "[i];\n");
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    const FusedOp& op = k.ops[i];
    absl::StrAppend(&out, "      const float v", k.num_inputs + i, " = ",
                    Substitute(Rules().at(op.op).expr, OperandNames(op)), ";  // ", op.op, "\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "      block", i, "[i] = v", k.outputs[i], ";\n");
  }
  absl::StrAppend(&out, "    }\n");
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "    __builtin_memcpy(out[", i, "] + base, block", i, ", n * sizeof(float));\n");
  }
  absl::StrAppend(&out, "  }\n}\n");
  return out;
}

std::string KernelSummary(const FusedKernel& k) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < k.ops.size(); ++i) {
    lines.push_back(absl::StrCat("v", k.num_inputs + i, " = ", k.ops[i].op, "(",
                                 absl::StrJoin(OperandNames(k.ops[i]), ", "), ")"));
  }
  std::vector<std::string> outs;
  for (int32_t v : k.outputs) outs.push_back(absl::StrCat("v", v));
  lines.push_back(absl::StrCat("store (", absl::StrJoin(outs, ", "), ")"));
  return absl::StrJoin(lines, "; ");
}

}  // namespace torch_neuron::compiler

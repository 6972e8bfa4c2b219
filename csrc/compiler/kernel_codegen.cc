#include "compiler/kernel_codegen.h"

#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

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
      {"aten::exp", {"T", "std::exp($0)"}},
      {"aten::log", {"T", "std::log($0)"}},
      {"aten::tanh", {"T", "std::tanh($0)"}},
      {"aten::sigmoid", {"T", "(1.0f / (1.0f + std::exp(-$0)))"}},
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

std::string Substitute(const std::string& expr, const std::vector<std::string>& operands) {
  std::vector<std::pair<std::string, std::string>> subs;
  for (size_t i = 0; i < operands.size(); ++i) subs.emplace_back(absl::StrCat("$", i), operands[i]);
  return absl::StrReplaceAll(expr, subs);
}

std::string OperandName(const FusedOp::Operand& o) {
  return o.scalar ? absl::StrCat("s", o.index) : absl::StrCat("v", o.index);
}

}  // namespace

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
  std::string out = absl::StrCat("// ", k.name, ": ", k.ops.size(), " ops over ", k.numel,
                                 " elements, ", k.num_inputs, " inputs, ", k.outputs.size(),
                                 " outputs\n#include <cmath>\n#include <cstdint>\n\n");
  absl::StrAppend(&out, "extern \"C\" void ", k.name,
                  "(const float* const* in, float* const* out, const double* scalars,\n",
                  "    int64_t begin, int64_t end) {\n");
  for (int32_t i = 0; i < k.num_inputs; ++i) {
    absl::StrAppend(&out, "  const float* __restrict__ in", i, " = in[", i, "];\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "  float* __restrict__ out", i, " = out[", i, "];\n");
  }
  for (int32_t i = 0; i < k.num_scalars; ++i) {
    absl::StrAppend(&out, "  const float s", i, " = static_cast<float>(scalars[", i, "]);\n");
  }
  absl::StrAppend(&out, "  for (int64_t i = begin; i < end; ++i) {\n");
  for (int32_t i = 0; i < k.num_inputs; ++i) {
    absl::StrAppend(&out, "    const float v", i, " = in", i, "[i];\n");
  }
  for (size_t i = 0; i < k.ops.size(); ++i) {
    const FusedOp& op = k.ops[i];
    std::vector<std::string> names;
    for (const FusedOp::Operand& o : op.operands) names.push_back(OperandName(o));
    absl::StrAppend(&out, "    const float v", k.num_inputs + i, " = ",
                    Substitute(Rules().at(op.op).expr, names), ";  // ", op.op, "\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&out, "    out", i, "[i] = v", k.outputs[i], ";\n");
  }
  absl::StrAppend(&out, "  }\n}\n");
  return out;
}

std::string KernelSummary(const FusedKernel& k) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < k.ops.size(); ++i) {
    std::vector<std::string> names;
    for (const FusedOp::Operand& o : k.ops[i].operands) names.push_back(OperandName(o));
    lines.push_back(absl::StrCat("v", k.num_inputs + i, " = ", k.ops[i].op, "(",
                                 absl::StrJoin(names, ", "), ")"));
  }
  std::vector<std::string> outs;
  for (int32_t v : k.outputs) outs.push_back(absl::StrCat("v", v));
  lines.push_back(absl::StrCat("store (", absl::StrJoin(outs, ", "), ")"));
  return absl::StrJoin(lines, "; ");
}

}  // namespace torch_neuron::compiler

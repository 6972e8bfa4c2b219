#include "compiler/kernel_rules.h"

namespace torch_neuron::compiler {
namespace {

constexpr c10::ScalarType kBool = c10::ScalarType::Bool;

}  // namespace

const absl::flat_hash_map<std::string, OpRule>& OpRules() {
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
      {"aten::gt.Scalar", {"TS", "($0 > $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::lt.Scalar", {"TS", "($0 < $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::ge.Scalar", {"TS", "($0 >= $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::le.Scalar", {"TS", "($0 <= $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::eq.Scalar", {"TS", "($0 == $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::ne.Scalar", {"TS", "($0 != $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::gt.Tensor", {"TT", "($0 > $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::lt.Tensor", {"TT", "($0 < $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::ge.Tensor", {"TT", "($0 >= $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::le.Tensor", {"TT", "($0 <= $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::eq.Tensor", {"TT", "($0 == $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::ne.Tensor", {"TT", "($0 != $1 ? 1.0f : 0.0f)", kBool}},
      {"aten::logical_not", {"T", "($0 != 0.0f ? 0.0f : 1.0f)", kBool}},
      {"aten::bitwise_not", {"T", "($0 != 0.0f ? 0.0f : 1.0f)", kBool}},  // of bool only: a bool result
      {"aten::where.self", {"TTT", "($0 != 0.0f ? $1 : $2)"}},
      // Casts (_to_copy to a dtype; the rule name holds the target): the value
      // is the one stored, so a later op in the kernel reads what ATen's would.
      {"aten::_to_copy[Float]", {"T", "$0"}},
      {"aten::_to_copy[Double]", {"T", "$0", c10::ScalarType::Double}},
      {"aten::_to_copy[Bool]", {"T", "($0 != 0.0f ? 1.0f : 0.0f)", kBool}},
      {"aten::_to_copy[Int]", {"T", "std::trunc($0)", c10::ScalarType::Int}},
      {"aten::_to_copy[Long]", {"T", "std::trunc($0)", c10::ScalarType::Long}},
      {"aten::_to_copy[BFloat16]", {"T", "tn_bf16_round($0)", c10::ScalarType::BFloat16}},
      {"aten::_to_copy[Half]", {"T", "tn_f16_round($0)", c10::ScalarType::Half}},
      {"aten::masked_fill.Scalar", {"TTS", "($1 != 0.0f ? $2 : $0)"}},
      {"aten::native_dropout_backward", {"TTS", "($0 * $1 * $2)"}},
      // GELU: an op's string attribute is part of its rule name. erf is
      // Abramowitz-Stegun 7.1.26, as ATen's vectorized CPU kernel computes it.
      {"aten::gelu[none]", {"T", "($0 * 0.5f * (1.0f + tn_erf($0 * 0.70710678118654752f)))"}},
      {"aten::gelu[tanh]",
       {"T", "(0.5f * $0 * (1.0f + tn_tanh(0.79788456080286536f * ($0 + 0.044715f * $0 * $0 * $0))))"}},
      {"aten::gelu_backward[none]",
       {"TT",
        "($0 * (0.5f * (1.0f + tn_erf($1 * 0.70710678118654752f)) + "
        "$1 * tn_exp(-0.5f * $1 * $1) * 0.39894228040143268f))"}},
      {"aten::gelu_backward[tanh]",
       {"TT",
        "($0 * (0.5f * (1.0f + tn_tanh(0.79788456080286536f * ($1 + 0.044715f * $1 * $1 * $1))) + "
        "0.5f * $1 * (1.0f - tn_tanh(0.79788456080286536f * ($1 + 0.044715f * $1 * $1 * $1)) * "
        "tn_tanh(0.79788456080286536f * ($1 + 0.044715f * $1 * $1 * $1))) * "
        "0.79788456080286536f * (1.0f + 3.0f * 0.044715f * $1 * $1)))"}},
  };
  return *rules;
}

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

bool RoundsScalars(const std::string& rule) {
  return rule == "aten::add.Tensor" || rule == "aten::sub.Tensor" || rule == "aten::add.Scalar" ||
         rule == "aten::sub.Scalar";
}

bool RoundedResultRule(const std::string& rule) {
  return rule != "aten::lerp.Scalar" && rule != "aten::addcmul" && rule != "aten::addcdiv" &&
         rule != "aten::pow.Tensor_Scalar";
}

}  // namespace torch_neuron::compiler

#include "lazy/structured_meta.h"

// What the meta headers below use without including it.
#include <ATen/core/Tensor.h>
#include <c10/util/OptionalArrayRef.h>
#include <c10/util/string_view.h>

// Each header declares one op's C++ meta functions (at::meta::add, ...): the
// ATen operator headers stay out of every other file.
#include <ATen/ops/_log_softmax_meta_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/acos_meta_dispatch.h>
#include <ATen/ops/acosh_meta_dispatch.h>
#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/addcdiv_meta_dispatch.h>
#include <ATen/ops/addcmul_meta_dispatch.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/addmv_meta_dispatch.h>
#include <ATen/ops/all_meta_dispatch.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/amin_meta_dispatch.h>
#include <ATen/ops/any_meta_dispatch.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/argmin_meta_dispatch.h>
#include <ATen/ops/asin_meta_dispatch.h>
#include <ATen/ops/asinh_meta_dispatch.h>
#include <ATen/ops/atan_meta_dispatch.h>
#include <ATen/ops/atan2_meta_dispatch.h>
#include <ATen/ops/atanh_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_backward_meta_dispatch.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/bitwise_and_meta_dispatch.h>
#include <ATen/ops/bitwise_left_shift_meta_dispatch.h>
#include <ATen/ops/bitwise_not_meta_dispatch.h>
#include <ATen/ops/bitwise_or_meta_dispatch.h>
#include <ATen/ops/bitwise_right_shift_meta_dispatch.h>
#include <ATen/ops/bitwise_xor_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/cat_meta_dispatch.h>
#include <ATen/ops/ceil_meta_dispatch.h>
#include <ATen/ops/clamp_max_meta_dispatch.h>
#include <ATen/ops/clamp_min_meta_dispatch.h>
#include <ATen/ops/copysign_meta_dispatch.h>
#include <ATen/ops/cos_meta_dispatch.h>
#include <ATen/ops/cosh_meta_dispatch.h>
#include <ATen/ops/cumprod_meta_dispatch.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/digamma_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/elu_meta_dispatch.h>
#include <ATen/ops/elu_backward_meta_dispatch.h>
#include <ATen/ops/eq_meta_dispatch.h>
#include <ATen/ops/erf_meta_dispatch.h>
#include <ATen/ops/erfc_meta_dispatch.h>
#include <ATen/ops/erfinv_meta_dispatch.h>
#include <ATen/ops/exp_meta_dispatch.h>
#include <ATen/ops/exp2_meta_dispatch.h>
#include <ATen/ops/expm1_meta_dispatch.h>
#include <ATen/ops/floor_meta_dispatch.h>
#include <ATen/ops/fmax_meta_dispatch.h>
#include <ATen/ops/fmin_meta_dispatch.h>
#include <ATen/ops/fmod_meta_dispatch.h>
#include <ATen/ops/frac_meta_dispatch.h>
#include <ATen/ops/gather_meta_dispatch.h>
#include <ATen/ops/gcd_meta_dispatch.h>
#include <ATen/ops/ge_meta_dispatch.h>
#include <ATen/ops/gelu_meta_dispatch.h>
#include <ATen/ops/gelu_backward_meta_dispatch.h>
#include <ATen/ops/gt_meta_dispatch.h>
#include <ATen/ops/hardshrink_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_backward_meta_dispatch.h>
#include <ATen/ops/heaviside_meta_dispatch.h>
#include <ATen/ops/hypot_meta_dispatch.h>
#include <ATen/ops/i0_meta_dispatch.h>
#include <ATen/ops/igamma_meta_dispatch.h>
#include <ATen/ops/igammac_meta_dispatch.h>
#include <ATen/ops/index_add_meta_dispatch.h>
#include <ATen/ops/isneginf_meta_dispatch.h>
#include <ATen/ops/isposinf_meta_dispatch.h>
#include <ATen/ops/lcm_meta_dispatch.h>
#include <ATen/ops/le_meta_dispatch.h>
#include <ATen/ops/leaky_relu_meta_dispatch.h>
#include <ATen/ops/leaky_relu_backward_meta_dispatch.h>
#include <ATen/ops/lerp_meta_dispatch.h>
#include <ATen/ops/lgamma_meta_dispatch.h>
#include <ATen/ops/linalg_vector_norm_meta_dispatch.h>
#include <ATen/ops/log_meta_dispatch.h>
#include <ATen/ops/log10_meta_dispatch.h>
#include <ATen/ops/log1p_meta_dispatch.h>
#include <ATen/ops/log2_meta_dispatch.h>
#include <ATen/ops/logaddexp_meta_dispatch.h>
#include <ATen/ops/logaddexp2_meta_dispatch.h>
#include <ATen/ops/lt_meta_dispatch.h>
#include <ATen/ops/max_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta_dispatch.h>
#include <ATen/ops/maximum_meta_dispatch.h>
#include <ATen/ops/mean_meta_dispatch.h>
#include <ATen/ops/min_meta_dispatch.h>
#include <ATen/ops/minimum_meta_dispatch.h>
#include <ATen/ops/mish_meta_dispatch.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/ops/mse_loss_meta_dispatch.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/ne_meta_dispatch.h>
#include <ATen/ops/neg_meta_dispatch.h>
#include <ATen/ops/nextafter_meta_dispatch.h>
#include <ATen/ops/nll_loss_backward_meta_dispatch.h>
#include <ATen/ops/nll_loss_forward_meta_dispatch.h>
#include <ATen/ops/pow_meta_dispatch.h>
#include <ATen/ops/prod_meta_dispatch.h>
#include <ATen/ops/reciprocal_meta_dispatch.h>
#include <ATen/ops/remainder_meta_dispatch.h>
#include <ATen/ops/round_meta_dispatch.h>
#include <ATen/ops/rsqrt_meta_dispatch.h>
#include <ATen/ops/scatter_meta_dispatch.h>
#include <ATen/ops/scatter_add_meta_dispatch.h>
#include <ATen/ops/scatter_reduce_meta_dispatch.h>
#include <ATen/ops/sgn_meta_dispatch.h>
#include <ATen/ops/sigmoid_meta_dispatch.h>
#include <ATen/ops/sigmoid_backward_meta_dispatch.h>
#include <ATen/ops/sign_meta_dispatch.h>
#include <ATen/ops/signbit_meta_dispatch.h>
#include <ATen/ops/silu_meta_dispatch.h>
#include <ATen/ops/silu_backward_meta_dispatch.h>
#include <ATen/ops/sin_meta_dispatch.h>
#include <ATen/ops/sinc_meta_dispatch.h>
#include <ATen/ops/sinh_meta_dispatch.h>
#include <ATen/ops/softplus_meta_dispatch.h>
#include <ATen/ops/softplus_backward_meta_dispatch.h>
#include <ATen/ops/softshrink_meta_dispatch.h>
#include <ATen/ops/sort_meta_dispatch.h>
#include <ATen/ops/sqrt_meta_dispatch.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/tan_meta_dispatch.h>
#include <ATen/ops/tanh_meta_dispatch.h>
#include <ATen/ops/tanh_backward_meta_dispatch.h>
#include <ATen/ops/threshold_meta_dispatch.h>
#include <ATen/ops/threshold_backward_meta_dispatch.h>
#include <ATen/ops/topk_meta_dispatch.h>
#include <ATen/ops/tril_meta_dispatch.h>
#include <ATen/ops/triu_meta_dispatch.h>
#include <ATen/ops/trunc_meta_dispatch.h>
#include <ATen/ops/xlogy_meta_dispatch.h>
#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/op_registration/infer_schema.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "lazy/meta_inference.h"

namespace torch_neuron::lazy {
namespace {

using T = const at::Tensor&;
using S = const at::Scalar&;
using OptT = const std::optional<at::Tensor>&;
using Unary = at::Tensor(T);
using Binary = at::Tensor(T, T);
using BinaryAlpha = at::Tensor(T, T, S);
// In-place forms: `self` is the output, so the CPU's checks of writing the
// result into it (its shape, the cast) run too. The tracer meets them below
// functionalization (inside a tensor subclass's __torch_dispatch__).
using BinaryInPlace = at::Tensor&(at::Tensor&, T);
using BinaryAlphaInPlace = at::Tensor&(at::Tensor&, T, S);
using TensorScalar = at::Tensor(T, S);
using Ternary = at::Tensor(T, T, T);
using TernaryScalar = at::Tensor(T, T, T, S);
using Addmm = at::Tensor(T, T, T, S, S);
using Softmax = at::Tensor(T, int64_t, bool);
using SoftmaxBackward = at::Tensor(T, T, int64_t, at::ScalarType);
using DimsReduction = at::Tensor(T, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>);
using DimReduction = at::Tensor(T, int64_t, bool);
using DimsBoolReduction = at::Tensor(T, at::OptionalIntArrayRef, bool);
using ValuesIndices = std::tuple<at::Tensor, at::Tensor>(T, int64_t, bool);
using Scan = at::Tensor(T, int64_t, std::optional<at::ScalarType>);
using Diagonal = at::Tensor(T, int64_t);
using Scatter = at::Tensor(T, int64_t, T, T);

// One entry: the op's schema name and its meta function's kernel, with the
// schema inferred from the function's C++ type (checked against the op's).
struct Entry {
  const char* name;
  c10::KernelFunction kernel;
  c10::FunctionSchema inferred;
};

template <typename Sig>
Entry Make(const char* name, Sig* fn) {
  return Entry{name, c10::KernelFunction::makeFromUnboxedRuntimeFunction(fn),
               c10::inferFunctionSchemaFlattenedReturns<Sig>()};
}

// The overload of at::meta::FN of type SIG.
#define TN_META(NAME, FN, ...) \
  Make<__VA_ARGS__>(NAME, static_cast<std::add_pointer_t<__VA_ARGS__>>(&at::meta::FN))

std::vector<Entry> Entries() {
  std::vector<Entry> e;
  // Pointwise, one tensor.
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, Unary*>>{
           {"aten::acos", &at::meta::acos},
           {"aten::acosh", &at::meta::acosh},
           {"aten::asin", &at::meta::asin},
           {"aten::asinh", &at::meta::asinh},
           {"aten::atan", &at::meta::atan},
           {"aten::atanh", &at::meta::atanh},
           {"aten::bitwise_not", &at::meta::bitwise_not},
           {"aten::ceil", &at::meta::ceil},
           {"aten::cos", &at::meta::cos},
           {"aten::cosh", &at::meta::cosh},
           {"aten::digamma", &at::meta::digamma},
           {"aten::erf", &at::meta::erf},
           {"aten::erfc", &at::meta::erfc},
           {"aten::erfinv", &at::meta::erfinv},
           {"aten::exp", &at::meta::exp},
           {"aten::exp2", &at::meta::exp2},
           {"aten::expm1", &at::meta::expm1},
           {"aten::floor", &at::meta::floor},
           {"aten::frac", &at::meta::frac},
           {"aten::hardsigmoid", &at::meta::hardsigmoid},
           {"aten::i0", &at::meta::i0},
           {"aten::isneginf", &at::meta::isneginf},
           {"aten::isposinf", &at::meta::isposinf},
           {"aten::lgamma", &at::meta::lgamma},
           {"aten::log", &at::meta::log},
           {"aten::log10", &at::meta::log10},
           {"aten::log1p", &at::meta::log1p},
           {"aten::log2", &at::meta::log2},
           {"aten::mish", &at::meta::mish},
           {"aten::neg", &at::meta::neg},
           {"aten::reciprocal", &at::meta::reciprocal},
           {"aten::round", &at::meta::round},
           {"aten::rsqrt", &at::meta::rsqrt},
           {"aten::sgn", &at::meta::sgn},
           {"aten::sigmoid", &at::meta::sigmoid},
           {"aten::sign", &at::meta::sign},
           {"aten::signbit", &at::meta::signbit},
           {"aten::silu", &at::meta::silu},
           {"aten::sin", &at::meta::sin},
           {"aten::sinc", &at::meta::sinc},
           {"aten::sinh", &at::meta::sinh},
           {"aten::sqrt", &at::meta::sqrt},
           {"aten::tan", &at::meta::tan},
           {"aten::tanh", &at::meta::tanh},
           {"aten::trunc", &at::meta::trunc},
       }) {
    e.push_back(Make<Unary>(name, fn));
  }
  // Pointwise, two tensors; and the backward ops of that form.
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, Binary*>>{
           {"aten::atan2", &at::meta::atan2},
           {"aten::bitwise_and.Tensor", &at::meta::bitwise_and},
           {"aten::bitwise_left_shift.Tensor", &at::meta::bitwise_left_shift},
           {"aten::bitwise_or.Tensor", &at::meta::bitwise_or},
           {"aten::bitwise_right_shift.Tensor", &at::meta::bitwise_right_shift},
           {"aten::bitwise_xor.Tensor", &at::meta::bitwise_xor},
           {"aten::clamp_max.Tensor", &at::meta::clamp_max},
           {"aten::clamp_min.Tensor", &at::meta::clamp_min},
           {"aten::copysign.Tensor", &at::meta::copysign},
           {"aten::div.Tensor", &at::meta::div},
           {"aten::eq.Tensor", &at::meta::eq},
           {"aten::fmax", &at::meta::fmax},
           {"aten::fmin", &at::meta::fmin},
           {"aten::fmod.Tensor", &at::meta::fmod},
           {"aten::gcd", &at::meta::gcd},
           {"aten::ge.Tensor", &at::meta::ge},
           {"aten::gt.Tensor", &at::meta::gt},
           {"aten::hardsigmoid_backward", &at::meta::hardsigmoid_backward},
           {"aten::heaviside", &at::meta::heaviside},
           {"aten::hypot", &at::meta::hypot},
           {"aten::igamma", &at::meta::igamma},
           {"aten::igammac", &at::meta::igammac},
           {"aten::lcm", &at::meta::lcm},
           {"aten::le.Tensor", &at::meta::le},
           {"aten::logaddexp", &at::meta::logaddexp},
           {"aten::logaddexp2", &at::meta::logaddexp2},
           {"aten::lt.Tensor", &at::meta::lt},
           {"aten::maximum", &at::meta::maximum},
           {"aten::minimum", &at::meta::minimum},
           {"aten::mul.Tensor", &at::meta::mul},
           {"aten::ne.Tensor", &at::meta::ne},
           {"aten::nextafter", &at::meta::nextafter},
           {"aten::pow.Tensor_Tensor", &at::meta::pow},
           {"aten::remainder.Tensor", &at::meta::remainder},
           {"aten::sigmoid_backward", &at::meta::sigmoid_backward},
           {"aten::silu_backward", &at::meta::silu_backward},
           {"aten::tanh_backward", &at::meta::tanh_backward},
           {"aten::xlogy.Tensor", &at::meta::xlogy},
           // Matrix products.
           {"aten::bmm", &at::meta::bmm},
           {"aten::mm", &at::meta::mm},
       }) {
    e.push_back(Make<Binary>(name, fn));
  }
  // A tensor and a number.
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, TensorScalar*>>{
           {"aten::clamp_max", &at::meta::clamp_max},
           {"aten::clamp_min", &at::meta::clamp_min},
           {"aten::eq.Scalar", &at::meta::eq},
           {"aten::ge.Scalar", &at::meta::ge},
           {"aten::gt.Scalar", &at::meta::gt},
           {"aten::hardshrink", &at::meta::hardshrink},
           {"aten::le.Scalar", &at::meta::le},
           {"aten::leaky_relu", &at::meta::leaky_relu},
           {"aten::lt.Scalar", &at::meta::lt},
           {"aten::ne.Scalar", &at::meta::ne},
           {"aten::pow.Tensor_Scalar", &at::meta::pow},
           {"aten::softshrink", &at::meta::softshrink},
       }) {
    e.push_back(Make<TensorScalar>(name, fn));
  }
  e.push_back(TN_META("aten::add.Tensor", add, BinaryAlpha));
  e.push_back(TN_META("aten::sub.Tensor", sub, BinaryAlpha));
  e.push_back(TN_META("aten::add_.Tensor", add_, BinaryAlphaInPlace));
  e.push_back(TN_META("aten::sub_.Tensor", sub_, BinaryAlphaInPlace));
  e.push_back(TN_META("aten::mul_.Tensor", mul_, BinaryInPlace));
  e.push_back(TN_META("aten::div_.Tensor", div_, BinaryInPlace));
  e.push_back(TN_META("aten::lerp.Scalar", lerp, BinaryAlpha));
  e.push_back(TN_META("aten::lerp.Tensor", lerp, Ternary));
  e.push_back(TN_META("aten::addcmul", addcmul, TernaryScalar));
  e.push_back(TN_META("aten::addcdiv", addcdiv, TernaryScalar));
  e.push_back(TN_META("aten::div.Tensor_mode", div, at::Tensor(T, T, std::optional<c10::string_view>)));
  e.push_back(TN_META("aten::pow.Scalar", pow, at::Tensor(S, T)));
  e.push_back(TN_META("aten::threshold", threshold, at::Tensor(T, S, S)));
  e.push_back(TN_META("aten::threshold_backward", threshold_backward, at::Tensor(T, T, S)));
  e.push_back(TN_META("aten::gelu", gelu, at::Tensor(T, c10::string_view)));
  e.push_back(TN_META("aten::gelu_backward", gelu_backward, at::Tensor(T, T, c10::string_view)));
  e.push_back(TN_META("aten::elu", elu, at::Tensor(T, S, S, S)));
  e.push_back(TN_META("aten::elu_backward", elu_backward, at::Tensor(T, S, S, S, bool, T)));
  e.push_back(TN_META("aten::softplus", softplus, at::Tensor(T, S, S)));
  e.push_back(TN_META("aten::softplus_backward", softplus_backward, at::Tensor(T, T, S, S)));
  e.push_back(TN_META("aten::leaky_relu_backward", leaky_relu_backward, at::Tensor(T, T, S, bool)));
  // Matrix products with an accumulator.
  e.push_back(TN_META("aten::addmm", addmm, Addmm));
  e.push_back(TN_META("aten::addmv", addmv, Addmm));
  e.push_back(TN_META("aten::baddbmm", baddbmm, Addmm));
  // Softmax and its backward.
  e.push_back(TN_META("aten::_softmax", _softmax, Softmax));
  e.push_back(TN_META("aten::_log_softmax", _log_softmax, Softmax));
  e.push_back(TN_META("aten::_softmax_backward_data", _softmax_backward_data, SoftmaxBackward));
  e.push_back(TN_META("aten::_log_softmax_backward_data", _log_softmax_backward_data, SoftmaxBackward));
  // Reductions and scans.
  e.push_back(TN_META("aten::sum.dim_IntList", sum, DimsReduction));
  e.push_back(TN_META("aten::mean.dim", mean, DimsReduction));
  e.push_back(TN_META("aten::amax", amax, at::Tensor(T, at::IntArrayRef, bool)));
  e.push_back(TN_META("aten::amin", amin, at::Tensor(T, at::IntArrayRef, bool)));
  e.push_back(TN_META("aten::max.dim", max, ValuesIndices));
  e.push_back(TN_META("aten::min.dim", min, ValuesIndices));
  e.push_back(TN_META("aten::argmax", argmax, at::Tensor(T, std::optional<int64_t>, bool)));
  e.push_back(TN_META("aten::argmin", argmin, at::Tensor(T, std::optional<int64_t>, bool)));
  e.push_back(TN_META("aten::all", all, Unary));
  e.push_back(TN_META("aten::all.dim", all, DimReduction));
  e.push_back(TN_META("aten::all.dims", all, DimsBoolReduction));
  e.push_back(TN_META("aten::any", any, Unary));
  e.push_back(TN_META("aten::any.dim", any, DimReduction));
  e.push_back(TN_META("aten::any.dims", any, DimsBoolReduction));
  e.push_back(
      TN_META("aten::prod.dim_int", prod, at::Tensor(T, int64_t, bool, std::optional<at::ScalarType>)));
  e.push_back(TN_META("aten::linalg_vector_norm", linalg_vector_norm,
                      at::Tensor(T, S, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>)));
  e.push_back(TN_META("aten::cumsum", cumsum, Scan));
  e.push_back(TN_META("aten::cumprod", cumprod, Scan));
  e.push_back(
      TN_META("aten::topk", topk, std::tuple<at::Tensor, at::Tensor>(T, int64_t, int64_t, bool, bool)));
  e.push_back(TN_META("aten::sort.stable", sort,
                      std::tuple<at::Tensor, at::Tensor>(T, std::optional<bool>, int64_t, bool)));
  // Shapes and indexing.
  e.push_back(TN_META("aten::cat", cat, at::Tensor(const at::ITensorListRef&, int64_t)));
  e.push_back(TN_META("aten::tril", tril, Diagonal));
  e.push_back(TN_META("aten::triu", triu, Diagonal));
  e.push_back(TN_META("aten::gather", gather, at::Tensor(T, int64_t, T, bool)));
  e.push_back(TN_META("aten::scatter.src", scatter, Scatter));
  e.push_back(TN_META("aten::scatter.value", scatter, at::Tensor(T, int64_t, T, S)));
  e.push_back(TN_META("aten::scatter_add", scatter_add, Scatter));
  e.push_back(TN_META("aten::scatter_reduce.two", scatter_reduce,
                      at::Tensor(T, int64_t, T, T, c10::string_view, bool)));
  e.push_back(TN_META("aten::index_add", index_add, at::Tensor(T, int64_t, T, T, S)));
  // Losses.
  e.push_back(TN_META("aten::nll_loss_forward", nll_loss_forward,
                      std::tuple<at::Tensor, at::Tensor>(T, T, OptT, int64_t, int64_t)));
  e.push_back(
      TN_META("aten::nll_loss_backward", nll_loss_backward, at::Tensor(T, T, T, OptT, int64_t, int64_t, T)));
  e.push_back(TN_META("aten::mse_loss", mse_loss, at::Tensor(T, T, int64_t)));
  // Pooling.
  e.push_back(TN_META(
      "aten::avg_pool2d", avg_pool2d,
      at::Tensor(T, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, bool, std::optional<int64_t>)));
  e.push_back(TN_META("aten::avg_pool2d_backward", avg_pool2d_backward,
                      at::Tensor(T, T, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, bool,
                                 std::optional<int64_t>)));
  e.push_back(TN_META("aten::max_pool2d_with_indices", max_pool2d_with_indices,
                      std::tuple<at::Tensor, at::Tensor>(T, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef,
                                                         at::IntArrayRef, bool)));
  e.push_back(
      TN_META("aten::max_pool2d_with_indices_backward", max_pool2d_with_indices_backward,
              at::Tensor(T, T, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, T)));
  return e;
}

#undef TN_META

// The table by operator name, built on first use (the aten schemas are
// registered by then). An entry whose inferred schema differs from the op's
// is left out: its kernel would read the stack as other types.
struct Table {
  std::unordered_map<c10::OperatorName, c10::KernelFunction> kernels;
  std::vector<std::string> names;
};

// "aten::add.Tensor" -> {"aten::add", "Tensor"}.
c10::OperatorName ParseName(const std::string& text) {
  const size_t dot = text.find('.');
  if (dot == std::string::npos) return c10::OperatorName(text, "");
  return c10::OperatorName(text.substr(0, dot), text.substr(dot + 1));
}

const Table& GetTable() {
  static const Table* table = [] {
    auto* t = new Table();
    for (Entry& entry : Entries()) {
      const c10::OperatorName name = ParseName(entry.name);
      std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema(name);
      TORCH_INTERNAL_ASSERT(op.has_value(), "structured meta table: no op ", entry.name);
      std::optional<std::string> difference = c10::findSchemaDifferences(entry.inferred, op->schema());
      TORCH_INTERNAL_ASSERT(!difference.has_value(), "structured meta table: ", entry.name, ": ",
                            *difference);
      t->names.emplace_back(entry.name);
      t->kernels.emplace(name, std::move(entry.kernel));
    }
    std::sort(t->names.begin(), t->names.end());
    return t;
  }();
  return *table;
}

std::atomic<bool> enabled{true};

}  // namespace

const c10::KernelFunction* StructuredMetaKernel(const c10::OperatorHandle& op) {
  if (!enabled.load(std::memory_order_relaxed)) return nullptr;
  const Table& table = GetTable();
  auto it = table.kernels.find(op.operator_name());
  return it == table.kernels.end() ? nullptr : &it->second;
}

bool SetStructuredMetaEnabled(bool on) {
  const bool was = enabled.exchange(on);
  if (was != on) ClearMetaCache();
  return was;
}

std::vector<std::string> StructuredMetaOps() { return GetTable().names; }

}  // namespace torch_neuron::lazy

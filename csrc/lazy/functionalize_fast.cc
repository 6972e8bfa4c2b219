#include "lazy/functionalize_fast.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_safe_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/avg_pool2d_backward_ops.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/embedding_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "lazy/bridge.h"

namespace torch_neuron::lazy {
namespace {

// What the fallback learns from the arguments: whether any is a tensor and
// whether any is functional (its outputs are wrapped if any input was
// functional, or if there was no tensor input at all).
struct Seen {
  bool tensor = false;
  bool functional = false;
};

at::Tensor UnwrapTensor(const at::Tensor& t, Seen& seen) {
  seen.tensor = true;
  if (t.defined() && at::functionalization::impl::isFunctionalTensor(t)) {
    seen.functional = true;
    at::functionalization::impl::sync(t);
    return at::functionalization::impl::from_functional_tensor(t);
  }
  return t;
}

// An argument as the op below functionalization takes it: tensors unwrapped,
// everything else passed on as it came.
template <class T>
struct Unwrap {
  static_assert(!std::is_same_v<std::decay_t<T>, at::Tensor>, "only const at::Tensor& tensors are handled");
  static_assert(!std::is_same_v<std::decay_t<T>, at::TensorList>, "tensor lists take the fallback");
  static_assert(!std::is_same_v<std::decay_t<T>, c10::List<std::optional<at::Tensor>>>,
                "tensor lists take the fallback");
  static_assert(!std::is_same_v<std::decay_t<T>, at::ITensorListRef>, "tensor lists take the fallback");
  static T&& Get(T&& v, Seen&) { return std::forward<T>(v); }
};

template <>
struct Unwrap<const at::Tensor&> {
  static at::Tensor Get(const at::Tensor& t, Seen& seen) { return UnwrapTensor(t, seen); }
};

template <>
struct Unwrap<const std::optional<at::Tensor>&> {
  // An absent optional tensor is no tensor input (the fallback sees None).
  static std::optional<at::Tensor> Get(const std::optional<at::Tensor>& t, Seen& seen) {
    if (!t.has_value()) return std::nullopt;
    return UnwrapTensor(*t, seen);
  }
};

at::Tensor Wrap(at::Tensor t) {
  if (!t.defined()) return t;
  return at::functionalization::impl::to_functional_tensor(t);
}

template <class... Ts>
std::tuple<Ts...> Wrap(std::tuple<Ts...> results) {
  static_assert((std::is_same_v<Ts, at::Tensor> && ...), "only tensor results are handled");
  return std::apply([](auto&&... t) { return std::tuple<Ts...>(Wrap(std::move(t))...); }, std::move(results));
}

bool IsNeuronArg(const at::Tensor& t) { return IsNeuron(t); }
bool IsNeuronArg(const std::optional<at::Tensor>& t) { return t.has_value() && IsNeuron(*t); }
template <class T>
bool IsNeuronArg(const T&) {
  return false;
}

// The kernel each op had at the Functionalize key before its fast path (the
// fallback), for calls without a neuron tensor; set before registering.
template <class Op>
std::optional<c10::SafeKernelFunction>& Original() {
  static std::optional<c10::SafeKernelFunction> original;
  return original;
}

template <class Op, class Schema = typename Op::schema>
struct FastPath;

template <class Op, class Ret, class... Args>
struct FastPath<Op, Ret(Args...)> {
  static Ret Call(c10::DispatchKeySet ks, Args... args) {
    if (!(IsNeuronArg(args) || ...)) {
      static const c10::OperatorHandle op =
          *c10::Dispatcher::singleton().findSchema({Op::name, Op::overload_name});
      torch::jit::Stack stack = c10::impl::boxArgs<Args...>(std::forward<Args>(args)...);
      Original<Op>()->callBoxed(op, ks, &stack);
      return c10::impl::PopResult<Ret>::call(stack);
    }
    Seen seen;
    // A braced initializer evaluates left to right, as the fallback walks its
    // arguments.
    std::tuple<decltype(Unwrap<Args>::Get(std::forward<Args>(args), seen))...> inner{
        Unwrap<Args>::Get(std::forward<Args>(args), seen)...};
    const bool wrap = !seen.tensor || seen.functional;
    Ret out = [&] {
      at::AutoDispatchSkipFunctionalize guard;
      return std::apply([](auto&&... a) { return Op::call(std::forward<decltype(a)>(a)...); },
                        std::move(inner));
    }();
    if (!wrap) return out;
    return Wrap(std::move(out));
  }
};

struct State {
  std::mutex mu;
  std::unique_ptr<torch::Library> library;
  std::vector<std::string> ops;
};

State& TheState() {
  static auto* state = new State();
  return *state;
}

template <class Op>
void Register(torch::Library& lib, std::vector<std::string>& ops) {
  const std::string overload = Op::overload_name;
  const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({Op::name, overload});
  // Only where the fallback would run: an op with a functionalization kernel of
  // its own (mutating and aliasing ops have them) keeps it.
  if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::Functionalize) || op->schema().hasAnyAliasInfo()) {
    return;
  }
  std::string name = std::string(Op::name).substr(6);  // less "aten::"
  if (!overload.empty()) name += "." + overload;
  Original<Op>() = op->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize);
  lib.impl(name.c_str(), TORCH_FN(FastPath<Op>::Call));
  ops.push_back(std::string(Op::name) + (overload.empty() ? "" : "." + overload));
}

template <class... Ops>
void RegisterAll(torch::Library& lib, std::vector<std::string>& ops) {
  (Register<Ops>(lib, ops), ...);
}

}  // namespace

void SetFunctionalizeFastPaths(bool on) {
  State& s = TheState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (on == (s.library != nullptr)) return;
  if (!on) {
    s.library.reset();  // deregisters every kernel
    s.ops.clear();
    return;
  }
  // The out-of-place ops a training step traces most (the models of
  // bench_training: pointwise math, matmuls, reductions, normalizations,
  // losses, convolutions and pooling, with their backward ops).
  s.library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize,
                                               __FILE__, __LINE__);
  namespace ops = at::_ops;
  RegisterAll<ops::add_Tensor, ops::add_Scalar, ops::sub_Tensor, ops::sub_Scalar, ops::mul_Tensor,
              ops::mul_Scalar, ops::div_Tensor, ops::div_Scalar, ops::div_Tensor_mode, ops::neg, ops::exp,
              ops::log, ops::sqrt, ops::rsqrt, ops::pow_Tensor_Scalar, ops::pow_Tensor_Tensor, ops::tanh,
              ops::sigmoid, ops::relu, ops::gelu, ops::silu, ops::tanh_backward, ops::sigmoid_backward,
              ops::gelu_backward, ops::silu_backward, ops::threshold_backward, ops::where_self,
              ops::masked_fill_Scalar>(*s.library, s.ops);
  RegisterAll<ops::mm, ops::bmm, ops::addmm, ops::sum, ops::sum_dim_IntList, ops::mean, ops::mean_dim,
              ops::amax, ops::_softmax, ops::_safe_softmax, ops::_softmax_backward_data, ops::_log_softmax,
              ops::_log_softmax_backward_data, ops::native_layer_norm, ops::native_layer_norm_backward,
              ops::native_batch_norm_backward, ops::native_dropout_backward, ops::embedding,
              ops::embedding_dense_backward, ops::nll_loss_forward, ops::nll_loss_backward, ops::convolution,
              ops::convolution_backward, ops::max_pool2d_with_indices, ops::max_pool2d_with_indices_backward,
              ops::avg_pool2d, ops::avg_pool2d_backward>(*s.library, s.ops);
}

bool FunctionalizeFastPathsOn() {
  State& s = TheState();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.library != nullptr;
}

std::vector<std::string> FunctionalizeFastPathOps() {
  State& s = TheState();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.ops;
}

}  // namespace torch_neuron::lazy

// Neuron's Meta kernels for the in-place _foreach_* ops and the functional
// _foreach_add and _foreach_sub (neuron_meta.h).
//
// Before functionalization rewrites an in-place op into its functional form, it
// runs the op once on meta copies of the arguments (the "meta reference"), so a
// shape or dtype error a user makes surfaces as it would in eager mode. ATen has
// no Meta kernel for the _foreach_*_ ops: the meta call takes their
// CompositeExplicitAutograd loop, which calls the per-tensor in-place op, and
// torch._meta_registrations has replaced those per-tensor ops' C++ Meta kernels
// with Python ones. A foreach AdamW step over 10 parameters ran 30 Python meta
// functions that way, 3-4 ms of a 14 ms step on neuron (bench_adamw).
//
// The kernels here make the same checks in C++: the foreach list rules
// (at::native::check_foreach_api_restrictions), then, per tensor, ATen's own
// structured meta function of the in-place op (at::meta::add_, ...), which
// rejects a broadcast that would resize self and a result dtype that cannot be
// cast to self's. Tensors with symbolic sizes (FakeTensor under torch.compile)
// never reach them: RunNeuronMeta gives those calls PyTorch's own Meta kernel,
// whose Python meta functions handle SymInts.
//
// The functional forms' loop calls the per-tensor functional op, whose Python
// Meta kernel accepts a bool subtraction the CPU refuses: the graph failed at
// the next sync. The kernels here call ATen's structured meta functions
// (at::meta::sub), whose checks are the CPU's.
//
// They are neuron's only (RegisterForeachMeta): neuron's in-place kernels
// (neuron_inplace.h) and the tracer's shape inference run them for neuron
// tensors; the Meta dispatch key keeps PyTorch's loop for everyone else. Ops not listed here keep the loop.
#include <ATen/ScalarOps.h>
#include <ATen/native/ForeachUtils.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_clamp_max_native.h>
#include <ATen/ops/_foreach_clamp_min_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_exp_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_pow_native.h>
#include <ATen/ops/_foreach_reciprocal_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_foreach_zero_native.h>
#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/addcdiv_meta_dispatch.h>
#include <ATen/ops/addcmul_meta_dispatch.h>
#include <ATen/ops/clamp_max_meta_dispatch.h>
#include <ATen/ops/clamp_min_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/exp_meta_dispatch.h>
#include <ATen/ops/lerp_meta_dispatch.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/neg_meta_dispatch.h>
#include <ATen/ops/pow_meta_dispatch.h>
#include <ATen/ops/reciprocal_meta_dispatch.h>
#include <ATen/ops/sqrt_meta_dispatch.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/zero_meta_dispatch.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lazy/cpu_parity_rules.h"
#include "lazy/neuron_meta.h"

namespace torch_neuron::lazy {
namespace {

using at::native::check_foreach_api_restrictions;
using Scalars = at::ArrayRef<at::Scalar>;

// What the Scalar forms pass to the per-tensor op: ATen's own Scalar overloads
// wrap the number the same way before they reach the structured kernel.
at::Tensor Wrapped(const at::Scalar& scalar) { return at::native::wrapped_scalar_tensor(scalar); }
const at::Scalar& AsIs(const at::Scalar& scalar) { return scalar; }

// Calls `per_tensor(self[i], i)` with a mutable handle on each self tensor, as
// the in-place meta functions take one.
template <typename PerTensor>
void Each(at::TensorList self, PerTensor per_tensor) {
  for (size_t i = 0; i < self.size(); ++i) {
    at::Tensor t = self[i];
    per_tensor(t, i);
  }
}

// add_ and sub_: an alpha on the List and Tensor forms.
#define TN_FOREACH_ALPHA_META(OP)                                                            \
  namespace foreach_##OP {                                                                   \
    void Scalar(at::TensorList self, const at::Scalar& scalar) {                             \
      check_foreach_api_restrictions(self);                                                  \
      const at::Tensor other = Wrapped(scalar); /* once, not per tensor */                   \
      Each(self, [&](at::Tensor& t, size_t) { at::meta::OP##_(t, other); });                 \
    }                                                                                        \
    void List(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {          \
      check_foreach_api_restrictions(self, other);                                           \
      Each(self, [&](at::Tensor& t, size_t i) { at::meta::OP##_(t, other[i], alpha); });     \
    }                                                                                        \
    void ScalarList(at::TensorList self, Scalars scalars) {                                  \
      check_foreach_api_restrictions(self, scalars);                                         \
      Each(self, [&](at::Tensor& t, size_t i) { at::meta::OP##_(t, Wrapped(scalars[i])); }); \
    }                                                                                        \
  }

// The functional add and sub (a new list): per tensor, ATen's structured meta
// function of the functional op, which makes the CPU's checks (a bool
// subtraction, a float alpha of integral tensors) that the per-tensor Python
// Meta kernels of the loop skip.
#define TN_FOREACH_ALPHA_FUNCTIONAL_META(OP)                                                              \
  namespace foreach_##OP##_functional {                                                                   \
    std::vector<at::Tensor> Scalar(at::TensorList self, const at::Scalar& scalar) {                       \
      check_foreach_api_restrictions(self);                                                               \
      const at::Tensor other = Wrapped(scalar); /* once, not per tensor */                                \
      std::vector<at::Tensor> out;                                                                        \
      for (const at::Tensor& t : self) out.push_back(at::meta::OP(t, other));                             \
      return out;                                                                                         \
    }                                                                                                     \
    std::vector<at::Tensor> List(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {    \
      check_foreach_api_restrictions(self, other);                                                        \
      std::vector<at::Tensor> out;                                                                        \
      for (size_t i = 0; i < self.size(); ++i) out.push_back(at::meta::OP(self[i], other[i], alpha));     \
      return out;                                                                                         \
    }                                                                                                     \
    std::vector<at::Tensor> ScalarList(at::TensorList self, Scalars scalars) {                            \
      check_foreach_api_restrictions(self, scalars);                                                      \
      std::vector<at::Tensor> out;                                                                        \
      for (size_t i = 0; i < self.size(); ++i) out.push_back(at::meta::OP(self[i], Wrapped(scalars[i]))); \
      return out;                                                                                         \
    }                                                                                                     \
  }

// The Scalar, List and ScalarList forms without alpha: mul_ and div_ pass
// their scalars wrapped (Wrapped), clamp_min_, clamp_max_ and pow_ as they are
// (AsIs: their per-tensor ops have Scalar overloads).
#define TN_FOREACH_BINARY_META(OP, AS_OPERAND)                                                  \
  namespace foreach_##OP {                                                                      \
    void Scalar(at::TensorList self, const at::Scalar& scalar) {                                \
      check_foreach_api_restrictions(self);                                                     \
      const auto other = AS_OPERAND(scalar); /* once, not per tensor */                         \
      Each(self, [&](at::Tensor& t, size_t) { at::meta::OP##_(t, other); });                    \
    }                                                                                           \
    void List(at::TensorList self, at::TensorList other) {                                      \
      check_foreach_api_restrictions(self, other);                                              \
      Each(self, [&](at::Tensor& t, size_t i) { at::meta::OP##_(t, other[i]); });               \
    }                                                                                           \
    void ScalarList(at::TensorList self, Scalars scalars) {                                     \
      check_foreach_api_restrictions(self, scalars);                                            \
      Each(self, [&](at::Tensor& t, size_t i) { at::meta::OP##_(t, AS_OPERAND(scalars[i])); }); \
    }                                                                                           \
  }

// mul_ and div_ also take one 0-dim tensor for the whole list.
#define TN_FOREACH_TENSOR_META(OP)                                           \
  namespace foreach_##OP {                                                   \
    void Tensor(at::TensorList self, const at::Tensor& other) {              \
      CheckForeachScalarTensor(other);                                       \
      check_foreach_api_restrictions(self);                                  \
      Each(self, [&](at::Tensor& t, size_t) { at::meta::OP##_(t, other); }); \
    }                                                                        \
  }

// addcmul_ and addcdiv_: self += value * (tensor1 op tensor2). The Tensor form
// reads its scalars' values, which a meta tensor does not have; it keeps the loop.
#define TN_FOREACH_POINTWISE_META(OP)                                                                       \
  namespace foreach_##OP {                                                                                  \
    void Scalar(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,                        \
                const at::Scalar& value) {                                                                  \
      check_foreach_api_restrictions(self, tensor1, tensor2);                                               \
      Each(self, [&](at::Tensor& t, size_t i) { at::meta::OP##_(t, tensor1[i], tensor2[i], value); });      \
    }                                                                                                       \
    void ScalarList(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2, Scalars scalars) { \
      check_foreach_api_restrictions(self, tensor1, tensor2, scalars);                                      \
      Each(self, [&](at::Tensor& t, size_t i) { at::meta::OP##_(t, tensor1[i], tensor2[i], scalars[i]); }); \
    }                                                                                                       \
  }

// Unary ops: the meta function checks that the result dtype casts to self's.
#define TN_FOREACH_UNARY_META(OP)                                     \
  namespace foreach_##OP {                                            \
    void Apply(at::TensorList self) {                                 \
      check_foreach_api_restrictions(self);                           \
      Each(self, [&](at::Tensor& t, size_t) { at::meta::OP##_(t); }); \
    }                                                                 \
  }

TN_FOREACH_ALPHA_META(add)
TN_FOREACH_ALPHA_META(sub)
TN_FOREACH_ALPHA_FUNCTIONAL_META(add)
TN_FOREACH_ALPHA_FUNCTIONAL_META(sub)
TN_FOREACH_BINARY_META(mul, Wrapped)
TN_FOREACH_BINARY_META(div, Wrapped)
TN_FOREACH_TENSOR_META(mul)
TN_FOREACH_TENSOR_META(div)
TN_FOREACH_BINARY_META(clamp_min, AsIs)
TN_FOREACH_BINARY_META(clamp_max, AsIs)
TN_FOREACH_BINARY_META(pow, AsIs)
TN_FOREACH_POINTWISE_META(addcmul)
TN_FOREACH_POINTWISE_META(addcdiv)
TN_FOREACH_UNARY_META(sqrt)
TN_FOREACH_UNARY_META(exp)
TN_FOREACH_UNARY_META(neg)
TN_FOREACH_UNARY_META(reciprocal)
TN_FOREACH_UNARY_META(zero)

#undef TN_FOREACH_ALPHA_META
#undef TN_FOREACH_ALPHA_FUNCTIONAL_META
#undef TN_FOREACH_BINARY_META
#undef TN_FOREACH_TENSOR_META
#undef TN_FOREACH_POINTWISE_META
#undef TN_FOREACH_UNARY_META

// add_.Tensor and sub_.Tensor carry alpha; only add has a Tensor form in ATen.
void AddTensor(at::TensorList self, const at::Tensor& other, const at::Scalar& alpha) {
  CheckForeachScalarTensor(other);
  check_foreach_api_restrictions(self);
  Each(self, [&](at::Tensor& t, size_t) { at::meta::add_(t, other, alpha); });
}

// lerp_: self += weight * (end - self), the weight one Scalar, one per tensor,
// or a tensor per tensor.
void LerpScalar(at::TensorList self, at::TensorList end, const at::Scalar& weight) {
  check_foreach_api_restrictions(self, end);
  Each(self, [&](at::Tensor& t, size_t i) { at::meta::lerp_(t, end[i], weight); });
}

void LerpScalarList(at::TensorList self, at::TensorList end, Scalars weights) {
  check_foreach_api_restrictions(self, end, weights);
  Each(self, [&](at::Tensor& t, size_t i) { at::meta::lerp_(t, end[i], weights[i]); });
}

void LerpList(at::TensorList self, at::TensorList end, at::TensorList weights) {
  check_foreach_api_restrictions(self, end, weights);
  Each(self, [&](at::Tensor& t, size_t i) { at::meta::lerp_(t, end[i], weights[i]); });
}

}  // namespace

void RegisterForeachMeta() {
  static bool done = [] {
    auto set = [](const char* name, c10::KernelFunction kernel) {
      std::string full = name;
      const size_t dot = full.find('.');
      const std::string overload = dot == std::string::npos ? "" : full.substr(dot + 1);
      if (dot != std::string::npos) full.resize(dot);
      std::optional<c10::OperatorHandle> op =
          c10::Dispatcher::singleton().findSchema(c10::OperatorName("aten::" + full, overload));
      TORCH_INTERNAL_ASSERT(op.has_value(), "no operator aten::", name);
      SetNeuronMetaKernel(*op, std::move(kernel));
    };
#define TN_FOREACH_META(name, fn) set(name, c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(fn)))
    TN_FOREACH_META("_foreach_add_.Scalar", foreach_add::Scalar);
    TN_FOREACH_META("_foreach_add_.List", foreach_add::List);
    TN_FOREACH_META("_foreach_add_.ScalarList", foreach_add::ScalarList);
    TN_FOREACH_META("_foreach_add_.Tensor", AddTensor);
    TN_FOREACH_META("_foreach_add.Scalar", foreach_add_functional::Scalar);
    TN_FOREACH_META("_foreach_add.List", foreach_add_functional::List);
    TN_FOREACH_META("_foreach_add.ScalarList", foreach_add_functional::ScalarList);
    TN_FOREACH_META("_foreach_sub.Scalar", foreach_sub_functional::Scalar);
    TN_FOREACH_META("_foreach_sub.List", foreach_sub_functional::List);
    TN_FOREACH_META("_foreach_sub.ScalarList", foreach_sub_functional::ScalarList);
    TN_FOREACH_META("_foreach_sub_.Scalar", foreach_sub::Scalar);
    TN_FOREACH_META("_foreach_sub_.List", foreach_sub::List);
    TN_FOREACH_META("_foreach_sub_.ScalarList", foreach_sub::ScalarList);
    TN_FOREACH_META("_foreach_mul_.Scalar", foreach_mul::Scalar);
    TN_FOREACH_META("_foreach_mul_.List", foreach_mul::List);
    TN_FOREACH_META("_foreach_mul_.ScalarList", foreach_mul::ScalarList);
    TN_FOREACH_META("_foreach_mul_.Tensor", foreach_mul::Tensor);
    TN_FOREACH_META("_foreach_div_.Scalar", foreach_div::Scalar);
    TN_FOREACH_META("_foreach_div_.List", foreach_div::List);
    TN_FOREACH_META("_foreach_div_.ScalarList", foreach_div::ScalarList);
    TN_FOREACH_META("_foreach_div_.Tensor", foreach_div::Tensor);
    TN_FOREACH_META("_foreach_clamp_min_.Scalar", foreach_clamp_min::Scalar);
    TN_FOREACH_META("_foreach_clamp_min_.List", foreach_clamp_min::List);
    TN_FOREACH_META("_foreach_clamp_min_.ScalarList", foreach_clamp_min::ScalarList);
    TN_FOREACH_META("_foreach_clamp_max_.Scalar", foreach_clamp_max::Scalar);
    TN_FOREACH_META("_foreach_clamp_max_.List", foreach_clamp_max::List);
    TN_FOREACH_META("_foreach_clamp_max_.ScalarList", foreach_clamp_max::ScalarList);
    TN_FOREACH_META("_foreach_pow_.Scalar", foreach_pow::Scalar);
    TN_FOREACH_META("_foreach_pow_.List", foreach_pow::List);
    TN_FOREACH_META("_foreach_pow_.ScalarList", foreach_pow::ScalarList);
    TN_FOREACH_META("_foreach_addcmul_.Scalar", foreach_addcmul::Scalar);
    TN_FOREACH_META("_foreach_addcmul_.ScalarList", foreach_addcmul::ScalarList);
    TN_FOREACH_META("_foreach_addcdiv_.Scalar", foreach_addcdiv::Scalar);
    TN_FOREACH_META("_foreach_addcdiv_.ScalarList", foreach_addcdiv::ScalarList);
    TN_FOREACH_META("_foreach_lerp_.Scalar", LerpScalar);
    TN_FOREACH_META("_foreach_lerp_.ScalarList", LerpScalarList);
    TN_FOREACH_META("_foreach_lerp_.List", LerpList);
    TN_FOREACH_META("_foreach_sqrt_", foreach_sqrt::Apply);
    TN_FOREACH_META("_foreach_exp_", foreach_exp::Apply);
    TN_FOREACH_META("_foreach_neg_", foreach_neg::Apply);
    TN_FOREACH_META("_foreach_reciprocal_", foreach_reciprocal::Apply);
    TN_FOREACH_META("_foreach_zero_", foreach_zero::Apply);
#undef TN_FOREACH_META
    return true;
  }();
  (void)done;
}

}  // namespace torch_neuron::lazy

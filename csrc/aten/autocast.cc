// torch.autocast("neuron"): the autocast kernels of the AutocastPrivateUse1
// key, with the op lists PyTorch keeps for backends to share
// (ATen/autocast_mode.h: the lists CUDA uses). Matmuls and convolutions run in
// the autocast dtype (bfloat16 or float16), reductions, norms, losses and
// pointwise ops prone to overflow in float32, and ops of several inputs in
// their widest input type. The cast ops the kernels insert are traced like
// any other, so an autocast step is still one graph.
//
// This file alone sees ATen's whole operator set (the lists name ~100 ops);
// every other file compiles against method operators only. The kernels are
// registered in registration.cc, through RegisterAutocastLists.
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>

#include "aten/autocast.h"

namespace torch_neuron::aten {

at::Tensor BinaryCrossEntropyRefused(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                     int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe "
              "to autocast on neuron, as on CUDA. Use binary_cross_entropy_with_logits or "
              "BCEWithLogitsLoss, which take the logits and are safe to autocast; or leave "
              "autocast for that op (torch.autocast(\"neuron\", enabled=False)).");
}

// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE names these types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

void RegisterAutocastLists(torch::Library& m) {
#define TN_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TN_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TN_AUTOCAST_FP32_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TN_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TN_AUTOCAST_LOWER)
  AT_FORALL_FP32(TN_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TN_AUTOCAST_FP32_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TN_AUTOCAST_PROMOTE)
#undef TN_AUTOCAST_LOWER
#undef TN_AUTOCAST_FP32
#undef TN_AUTOCAST_FP32_DTYPE
#undef TN_AUTOCAST_PROMOTE
}

}  // namespace torch_neuron::aten

#include "aten/determinants.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace torch_neuron::aten {
namespace {

struct Factors {
  at::Tensor lu;
  at::Tensor pivots;
};

// The factors the CPU kernel computes for A as A reports its layout, with the
// CPU's argument checks (slogdet refuses half precision itself; det leaves it
// to lu_factor_ex).
Factors Factorize(const at::Tensor& A, const char* name, bool low_precision) {
  TORCH_CHECK(A.dim() >= 2, name, ": The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(A.size(-1) == A.size(-2), name, ": A must be batches of square matrices, but they are ",
              A.size(-2), " by ", A.size(-1), " matrices");
  const c10::ScalarType dtype = A.scalar_type();
  TORCH_CHECK(at::isFloatingType(dtype) || at::isComplexType(dtype), name,
              ": Expected a floating point or complex tensor as input. Got ", dtype);
  const bool half = dtype == c10::kHalf || dtype == c10::kBFloat16 || dtype == c10::kComplexHalf;
  TORCH_CHECK(low_precision || !half, name, ": Low precision dtypes not supported. Got ", dtype);
  // The CPU's LU kernel has no half-precision instance.
  TORCH_CHECK_NOT_IMPLEMENTED(!half, "\"lu_cpu\" not implemented for '", c10::toString(dtype), "'");
  const bool factor_transpose = A.is_contiguous() && !A.is_complex();
  auto [lu, pivots, info] = at::linalg_lu_factor_ex(factor_transpose ? A.mH() : A);
  return {lu, pivots};
}

// The determinant of the permutation the pivots encode: -1 for each row swap.
at::Tensor PermutationSign(const at::Tensor& pivots, const at::Tensor& like) {
  const int64_t n = pivots.size(-1);
  const at::Tensor rows = at::arange(1, n + 1, pivots.options());
  const at::Tensor swaps = pivots.ne(rows).sum(-1);
  return at::where(swaps.remainder(2).eq(0), at::ones({}, like.options()), at::full({}, -1, like.options()));
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> LinalgDet(const at::Tensor& A) {
  Factors f = Factorize(A, "linalg.det", /*low_precision=*/true);
  at::Tensor det = f.lu.diagonal(0, -2, -1).prod(-1) * PermutationSign(f.pivots, A);
  return {det, f.lu, f.pivots};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> LinalgSlogdet(const at::Tensor& A) {
  Factors f = Factorize(A, "linalg.slogdet", /*low_precision=*/false);
  const at::Tensor diag = f.lu.diagonal(0, -2, -1);
  at::Tensor logabsdet = diag.abs().log().sum(-1);
  at::Tensor sign = diag.sgn().prod(-1) * PermutationSign(f.pivots, A);
  return {sign, logabsdet, f.lu, f.pivots};
}

}  // namespace torch_neuron::aten

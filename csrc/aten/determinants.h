// _linalg_det and _linalg_slogdet of neuron tensors, as compositions of
// linalg_lu_factor_ex.
//
// Both return the LU factors they computed, which their backward formulas
// reuse. The CPU kernel factors A^T instead of A when A is contiguous and real
// (a copy saved), and the backward makes the same choice from A's strides to
// read the factors. On neuron the two choices were made from different
// layouts: the forward's by the CPU kernel at run time, on the device's buffer
// (dense in logical order, or as an earlier kernel of the same graph left it),
// the backward's from the layout the neuron tensor reports. For a transposed
// matrix (det(A.mT)) they disagree and the gradient came out wrong, silently.
// Here the choice is made once, at the call, from the reported layout, as the
// backward will make it; lu_factor_ex's factors do not depend on its input's
// layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

namespace torch_neuron::aten {

// (det, LU, pivots), as aten::_linalg_det.
std::tuple<at::Tensor, at::Tensor, at::Tensor> LinalgDet(const at::Tensor& A);

// (sign, logabsdet, LU, pivots), as aten::_linalg_slogdet.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> LinalgSlogdet(const at::Tensor& A);

}  // namespace torch_neuron::aten

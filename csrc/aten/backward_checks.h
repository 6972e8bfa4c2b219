// Checks of ATen's backward formulas that ATen skips for neuron tensors.
//
// A few formulas in FunctionsManual.cpp guard a value check with
// !isTensorSubclassLike(...): the check reads a value (allclose -> item), which
// a vmap or functorch wrapper cannot give. Every neuron tensor carries the
// Functionalize key (a FunctionalTensorWrapper), so the test counts it as such
// a wrapper and the check is skipped: the CPU refuses the backward, neuron
// returned a gradient. The only such check is linalg_eig_backward's (used by
// linalg.eig and linalg.eigh): a loss of complex eigenvectors must not depend
// on their phase (Im diag(V^H gV) == 0). svd_backward makes its phase check
// unconditionally, so it raises on neuron already; the other guards choose an
// out-of-place form or another formula for the same gradient (prod, cumprod,
// max/min ties, index, take, masked_select, det's second derivative through
// an SVD), which neuron gives as the CPU does. Elsewhere in ATen the same test
// changes behaviour in ctc_loss with length tensors (composite_kernels.h) and
// composite out= kernels (lazy/out_checks.cc), handled there.
//
// The kernels here run the autograd kernel that was there (the generated one)
// and, when the eigenvectors are complex and require grad, hook the check on
// them: it runs in the backward, where the CPU's runs, on the gradient the
// backward node receives, and raises the CPU's error in the CPU's words. It
// reads one value, so it syncs once per such backward.
#pragma once

#include <torch/library.h>

namespace torch_neuron::aten {

// Registers the kernels above in `library` (AutogradPrivateUse1, namespace aten).
void RegisterEigenvectorPhaseChecks(torch::Library& library);

}  // namespace torch_neuron::aten

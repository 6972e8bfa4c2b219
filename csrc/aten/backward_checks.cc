#include "aten/backward_checks.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <memory>
#include <utility>

namespace torch_neuron::aten {
namespace {

// ATen's own test (linalg_eig_backward), on the gradient of the eigenvectors.
void CheckPhaseInvariance(const at::Tensor& eigenvectors, const at::Tensor& grad, bool hermitian) {
  if (!grad.defined()) return;
  at::NoGradGuard no_grad;
  const at::Tensor imag_diag = at::imag(at::matmul(eigenvectors.mH(), grad).diagonal(0, -2, -1));
  TORCH_CHECK(at::allclose(imag_diag, at::zeros_like(imag_diag), /*rtol=*/1e-2, /*atol=*/1e-2),
              hermitian ? "linalg_eigh_backward" : "linalg_eig_backward",
              ": The eigenvectors in the complex case are specified up to multiplication ",
              "by e^{i phi}. The specified loss function depends on this quantity, so it is ill-defined.");
}

// The op's autograd kernel, then the check hooked on its eigenvectors (its
// last result).
class EigenvectorPhaseCheck final : public c10::OperatorKernel {
 public:
  EigenvectorPhaseCheck(c10::SafeKernelFunction original, bool hermitian)
      : original_(std::move(original)), hermitian_(hermitian) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    original_.callBoxed(op, ks, stack);
    const at::Tensor& eigenvectors = stack->back().toTensor();
    if (!eigenvectors.is_complex() || !eigenvectors.requires_grad() || eigenvectors.numel() == 0) return;
    // Detached: the hook lives on the eigenvectors' own backward node, which
    // must not keep them alive through it.
    at::Tensor values = eigenvectors.detach();
    const bool hermitian = hermitian_;
    eigenvectors.register_hook([values = std::move(values), hermitian](const at::Tensor& grad) {
      CheckPhaseInvariance(values, grad, hermitian);
    });
  }

 private:
  c10::SafeKernelFunction original_;
  bool hermitian_;
};

}  // namespace

void RegisterEigenvectorPhaseChecks(torch::Library& library) {
  struct Op {
    const char* name;
    bool hermitian;
  };
  for (const Op& op : {Op{"linalg_eig", false}, Op{"_linalg_eigh", true}}) {
    const c10::OperatorHandle handle =
        c10::Dispatcher::singleton().findSchemaOrThrow((std::string("aten::") + op.name).c_str(), "");
    library.impl(op.name, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<EigenvectorPhaseCheck>(
                              handle.getComputedKernelForDispatchKey(c10::DispatchKey::AutogradPrivateUse1),
                              op.hermitian)));
  }
}

}  // namespace torch_neuron::aten

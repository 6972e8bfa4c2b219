// The ATen kernels of this stage, registered with PyTorch's dispatcher: one
// block per dispatch key, one line per kernel. Kernels on neuron's own keys act
// on neuron tensors only by construction; the Functionalize kernels check for
// a neuron tensor and otherwise run the kernel that was there (docs/DISPATCH.md
// lists every registration, generated from the dispatcher's own tables).
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "aten/composite_kernels.h"
#include "aten/view_copies.h"
#include "lazy/neuron_inplace.h"

namespace torch_neuron::aten {
namespace {

// Swallows the dispatcher's "overriding a previously registered kernel"
// warning while the view-copy kernels replace functionalization's own.
class SilentWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace

// The composites, on both of neuron's keys: autograd differentiates the ops
// they call; under inference_mode (which skips the autograd keys) the same
// kernel runs at PrivateUse1.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(FusedLstmCell));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(FusedGruCell));
  m.impl("ctc_loss.Tensor", TORCH_FN(CtcLoss));
  m.impl("_foreach_addcdiv.Tensor", TORCH_FN(ForeachAddcdivScalarTensor));
  m.impl("_foreach_addcmul.Tensor", TORCH_FN(ForeachAddcmulScalarTensor));
  m.impl("_foreach_addcdiv_.Tensor", TORCH_FN(ForeachAddcdivScalarTensor_));
  m.impl("_foreach_addcmul_.Tensor", TORCH_FN(ForeachAddcmulScalarTensor_));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(FusedLstmCell));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(FusedGruCell));
  m.impl("ctc_loss.Tensor", TORCH_FN(CtcLoss));
  m.impl("_foreach_addcdiv.Tensor", TORCH_FN(ForeachAddcdivScalarTensor));
  m.impl("_foreach_addcmul.Tensor", TORCH_FN(ForeachAddcmulScalarTensor));
  m.impl("_foreach_addcdiv_.Tensor", TORCH_FN(ForeachAddcdivScalarTensor_));
  m.impl("_foreach_addcmul_.Tensor", TORCH_FN(ForeachAddcmulScalarTensor_));
}

TORCH_LIBRARY_IMPL(aten, Functionalize, m) {
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard guard(&silent);
  RegisterViewCopies(m);  // every *_copy overload of a strided view, one kernel each
  // The foreach ops' in-place forms with packed scalars: PyTorch's own kernel
  // here hands the CPU scalars to the Meta kernel as a meta tensor, which
  // refuses it; neuron's in-place kernel keeps them on the host (a neuron
  // tensor reaches it first under inference_mode, which skips autograd).
  for (const char* name : {"aten::_foreach_addcdiv_", "aten::_foreach_addcmul_"}) {
    lazy::RegisterNeuronInPlace(c10::Dispatcher::singleton().findSchemaOrThrow(name, "Tensor"));
  }
}

}  // namespace torch_neuron::aten

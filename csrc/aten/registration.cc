// Every ATen kernel torch_neuron registers with PyTorch's dispatcher, in one
// place: one block per dispatch key, one line per kernel (or per list, where a
// list of ops shares one kernel). Kernels on neuron's own keys (PrivateUse1 and
// its autograd, autocast, quantized and sparse keys) act on neuron tensors only
// by construction; the Functionalize kernels check for a neuron tensor and
// otherwise run the kernel that was there. docs/DISPATCH.md lists every
// registration, generated from the dispatcher's own tables.
//
// Registered here at load: the blocks below. Registered when torch_neuron is
// imported (each names its ops at run time, from the dispatcher): the tracer
// for ops with device-generic composite kernels (lazy/tracer.h), the unboxed
// functionalization fast paths, lift_fresh/copy_ and the factories at
// PythonTLSSnapshot (lazy/bridge.h), the out=
// checks (lazy/out_checks.h) and the in-place kernels of ops with neuron Meta
// checks (lazy/neuron_inplace.h), which lazy/cpu_parity.h registers with its
// Meta kernels (those are neuron's own table, never a dispatch key's).
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>

#include "aten/autocast.h"
#include "aten/backward_checks.h"
#include "aten/composite_kernels.h"
#include "aten/determinants.h"
#include "aten/forward_ad.h"
#include "aten/view_copies.h"
#include "lazy/aten_copy.h"
#include "lazy/aten_random.h"
#include "lazy/bridge.h"
#include "lazy/dtype_widening.h"
#include "lazy/fused_optimizers.h"
#include "lazy/neuron_inplace.h"
#include "lazy/cpu_parity_rules.h"
#include "lazy/tracer.h"
#include "runtime/collectives.h"
#include "runtime/device_assert.h"

namespace torch_neuron::aten {
using torch::CppFunction;

namespace {

// The compositions of neuron ops (composite_kernels.h), on both of neuron's
// keys.
void RegisterComposites(torch::Library& m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(FusedLstmCell));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(FusedGruCell));
  m.impl("ctc_loss.Tensor", TORCH_FN(CtcLoss));
  m.impl("_foreach_addcdiv.Tensor", TORCH_FN(ForeachAddcdivScalarTensor));
  m.impl("_foreach_addcmul.Tensor", TORCH_FN(ForeachAddcmulScalarTensor));
  m.impl("_foreach_addcdiv_.Tensor", TORCH_FN(ForeachAddcdivScalarTensor_));
  m.impl("_foreach_addcmul_.Tensor", TORCH_FN(ForeachAddcmulScalarTensor_));
}

}  // namespace

// Every op on neuron tensors without a kernel of its own is traced.
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(CppFunction::makeFromBoxedFunction<&lazy::TraceOp>()); }
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(CppFunction::makeFromBoxedFunction<&lazy::RejectQuantized>());
}
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(CppFunction::makeFromBoxedFunction<&lazy::RejectSparse>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(CppFunction::makeFromBoxedFunction<&lazy::RejectSparse>());
}
// Ops not in autocast's lists run as they are.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Data across the device boundary, and reads (lazy/aten_copy.h).
  m.impl("copy", CppFunction::makeFromBoxedFunction<&lazy::CopyKernel>());
  m.impl("copy_", CppFunction::makeFromBoxedFunction<&lazy::InPlaceCopyKernel>());
  m.impl("_to_copy", CppFunction::makeFromBoxedFunction<&lazy::ToCopyKernel>());
  m.impl("_copy_from", TORCH_FN(lazy::CopyFrom));
  m.impl("_copy_from_and_resize", TORCH_FN(lazy::CopyFromAndResize));
  m.impl("_local_scalar_dense", TORCH_FN(lazy::LocalScalarDense));
  m.impl("resize_", TORCH_FN(lazy::Resize));
  // Dropout drawn from the neuron generator (lazy/aten_random.h).
  m.impl("native_dropout", TORCH_FN(lazy::NativeDropout));
  // normal with a tensor std: its values checked at the call, as CUDA checks them (lazy/aten_random.h).
  for (const char* normal : {"normal.Tensor_Tensor", "normal.float_Tensor", "normal.Tensor_Tensor_out",
                             "normal.float_Tensor_out"}) {
    m.impl(normal, CppFunction::makeFromBoxedFunction<&lazy::NormalWithStdTensor>());
  }
  // Integers binned as CUDA bins them (lazy/dtype_widening.h).
  m.impl("histc", CppFunction::makeFromBoxedFunction<&lazy::HistcOfIntegers>());
  // uint8 masks: the CPU's warning at the call, bool masks traced (lazy/dtype_widening.h).
  for (const char* index_put : {"index_put", "index_put_", "_index_put_impl", "_index_put_impl_"}) {
    m.impl(index_put, CppFunction::makeFromBoxedFunction<&lazy::IndexPutOfByteMasks>());
  }
  // Determinants factored as their backward reads the factors (determinants.h).
  m.impl("_linalg_det", TORCH_FN(LinalgDet));
  m.impl("_linalg_slogdet", TORCH_FN(LinalgSlogdet));
  RegisterComposites(m);  // also here: inference_mode skips the autograd keys
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  RegisterComposites(m);  // differentiated through the neuron ops they call
  // linalg.eig/eigh: the eigenvectors' phase check ATen skips for neuron tensors (backward_checks.h).
  RegisterEigenvectorPhaseChecks(m);
  // Fused optimizer steps as one traced node each (lazy/fused_optimizers.h).
  m.impl("_fused_adam_", CppFunction::makeFromBoxedFunction<&lazy::FusedStepOnNeuron>());
  m.impl("_fused_adam_.tensor_lr", CppFunction::makeFromBoxedFunction<&lazy::FusedStepOnNeuron>());
  m.impl("_fused_adamw_", CppFunction::makeFromBoxedFunction<&lazy::FusedStepOnNeuron>());
  m.impl("_fused_adamw_.tensor_lr", CppFunction::makeFromBoxedFunction<&lazy::FusedStepOnNeuron>());
  m.impl("_fused_sgd_", CppFunction::makeFromBoxedFunction<&lazy::FusedStepOnNeuron>());
  m.impl("_fused_sgd_.tensor_lr", CppFunction::makeFromBoxedFunction<&lazy::FusedStepOnNeuron>());
  m.impl("_fused_adagrad_", CppFunction::makeFromBoxedFunction<&lazy::FusedStepOnNeuron>());
  m.impl("_fused_adagrad_.tensor_lr", CppFunction::makeFromBoxedFunction<&lazy::FusedStepOnNeuron>());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  RegisterAutocastLists(m);  // ATen's shared lists: one kernel per listed op (autocast.h)
  m.impl("binary_cross_entropy", TORCH_FN(BinaryCrossEntropyRefused));
}

TORCH_LIBRARY_IMPL(aten, Functionalize, m) {
  lazy::SilenceOverrideWarnings silence;
  RegisterViewCopies(m);                 // every *_copy overload of a strided view, one kernel each
  RegisterForwardAdKernels(m);           // make_dual's storage-size check, from the wrappers (forward_ad.h)
  lazy::RegisterToCopyFunctionalize(m);  // a neuron tensor's .to() comes back wrapped (aten_copy.h)
  // The foreach ops' in-place forms with packed scalars: PyTorch's own kernel
  // here hands the CPU scalars to the Meta kernel as a meta tensor, which
  // refuses it; neuron's in-place kernel keeps them on the host (a neuron
  // tensor reaches it first under inference_mode, which skips autograd).
  for (const char* name : {"aten::_foreach_addcdiv_", "aten::_foreach_addcmul_"}) {
    lazy::RegisterNeuronInPlace(c10::Dispatcher::singleton().findSchemaOrThrow(name, "Tensor"));
  }
  // In-place ops the CPU refuses to let write over their arguments
  // (lazy/cpu_parity_rules.h) take neuron's in-place kernel, which checks.
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (name.name.rfind("aten::", 0) == 0 && op && lazy::IsInPlaceOp(*op) && lazy::HasOverlapRule(*op)) {
      lazy::RegisterNeuronInPlace(*op);
    }
  }
}

// neuron's own ops: the collectives (runtime/collectives.h), traced like any op
// on neuron tensors, whose host kernels run the collective when the graph runs;
// the tensor assert of a graph that must stay one program (runtime/device_assert.h).
TORCH_LIBRARY_FRAGMENT(neuron, m) {
  m.def("all_reduce(Tensor self, str reduce_op, str group) -> Tensor");
  m.def("broadcast(Tensor self, int src, str group) -> Tensor");
  m.def("all_gather_into_tensor(Tensor self, int world_size, str group) -> Tensor");
  m.def("reduce_scatter_tensor(Tensor self, str reduce_op, int world_size, str group) -> Tensor");
  m.def(
      "all_to_all_single(Tensor self, int[] output_split_sizes, int[] input_split_sizes, str group) -> "
      "Tensor");
  m.def("send(Tensor self, int dst, int tag, str group) -> Tensor");
  m.def("recv(Tensor self, int src, int tag, str group) -> Tensor");
  // A tensor assert a program runs (runtime/device_assert.h).
  m.def(runtime::kDeviceAssertSchema);
}

TORCH_LIBRARY_IMPL(neuron, CPU, m) {
  m.impl("all_reduce", TORCH_FN(runtime::AllReduce));
  m.impl("broadcast", TORCH_FN(runtime::Broadcast));
  m.impl("all_gather_into_tensor", TORCH_FN(runtime::AllGatherIntoTensor));
  m.impl("reduce_scatter_tensor", TORCH_FN(runtime::ReduceScatterTensor));
  m.impl("all_to_all_single", TORCH_FN(runtime::AllToAllSingle));
  m.impl("send", TORCH_FN(runtime::Send));
  m.impl("recv", TORCH_FN(runtime::Recv));
  m.impl("assert_async", TORCH_FN(runtime::AssertAsync));
}

TORCH_LIBRARY_IMPL(neuron, Meta, m) {
  m.impl("all_reduce", TORCH_FN(runtime::AllReduceMeta));
  m.impl("broadcast", TORCH_FN(runtime::BroadcastMeta));
  m.impl("all_gather_into_tensor", TORCH_FN(runtime::AllGatherIntoTensorMeta));
  m.impl("reduce_scatter_tensor", TORCH_FN(runtime::ReduceScatterTensorMeta));
  m.impl("all_to_all_single", TORCH_FN(runtime::AllToAllSingleMeta));
  m.impl("send", TORCH_FN(runtime::SendMeta));
  m.impl("recv", TORCH_FN(runtime::RecvMeta));
  m.impl("assert_async", TORCH_FN(runtime::AssertAsyncMeta));
}

}  // namespace torch_neuron::aten

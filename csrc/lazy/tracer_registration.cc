// Which ops reach the tracer: the PrivateUse1 fallback (tracer.cc) takes
// every op without a neuron kernel; RegisterTracerForCompositeOps adds the
// ops whose composite kernels would otherwise run on neuron; quantized and
// sparse neuron tensors are refused by name.
#include <torch/library.h>

#include "ir/op_traits.h"
#include "lazy/aten_ops.h"
#include "lazy/cpu_fallback.h"
#include "lazy/trace_info.h"
#include "lazy/tracer.h"
#include "runtime/dtype_checks.h"
#include "ir/op_schema.h"

namespace torch_neuron::lazy {

using ir::IsListOf;
using ir::IsTensorType;

int RegisterTracerForCompositeOps() {
  static int registered = [] {
    auto* lib =
        new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    int count = 0;
    ForEachAtenOp([&](const c10::OperatorHandle& op, const std::string& overload) {
      const bool composite =
          op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
      if (!composite || op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return;
      // In-place and out= ops too: functionalization keeps them from user code,
      // but composite kernels and Python custom ops running below it mutate
      // fresh neuron tensors, and the device-generic composite kernels of those
      // ops would reach a storage-less tensor's (missing) memory.
      const ir::OpTraits& traits = ir::TraitsOf(OpName(op));
      if (traits.data_dependent) return;
      if (UsesDefaultGeneratorImplicitly(op, traits)) return;
      bool tensor_returns = true;
      for (const c10::Argument& ret : op.schema().returns()) {
        tensor_returns &= IsTensorType(ret.type()) || IsListOf(ret.type(), c10::TypeKind::TensorType);
      }
      if (!tensor_returns) return;
      lib->impl(overload.c_str(), torch::CppFunction::makeFromBoxedFunction<&TraceOp>());
      ++count;
    });
    return count;
  }();
  return registered;
}

// Quantized dtypes on neuron dispatch to QuantizedPrivateUse1: refuse them with
// the same TypeError as every other unsupported dtype, naming it.
void RejectQuantized(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t num_args = op.schema().arguments().size();
  for (size_t i = stack->size() - num_args; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && c10::isQIntType(v.toTensor().scalar_type())) {
      runtime::CheckSupportedDtype(v.toTensor().scalar_type());
    }
    if (op.schema().arguments()[i - (stack->size() - num_args)].name() == "dtype" && v.isInt()) {
      runtime::CheckSupportedDtype(static_cast<c10::ScalarType>(v.toInt()));
    }
  }
  TORCH_CHECK_TYPE(false, "neuron devices do not support quantized tensors (in ", OpName(op), ")");
}

// Sparse layouts on neuron (sparse_cpu.to("neuron"), zeros(layout=sparse_coo,
// device="neuron")) dispatch to the sparse keys: say so, and what to do.
void RejectSparse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, kSparseUnsupported, " (in ", OpName(op), ")");
}

}  // namespace torch_neuron::lazy

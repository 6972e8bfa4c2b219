// Ops whose CPU kernels lack dtypes an accelerator's kernels take.
//
// Libraries choose dtypes by device type: transformers' mixture-of-experts
// routing counts tokens per expert with torch.histc on int32 on every device
// but the CPU and MPS, because CUDA's histc takes integers and the CPU's does
// not. The emulated device runs ATen's CPU kernels, so such an op would fail
// when its graph ran. Each op here traces as itself on a wider dtype the CPU
// kernel takes, with its result converted back: what CUDA computes, for
// inputs where the wider dtype is exact. index_put's uint8 masks trace as the
// bool masks the CPU's kernel reads them as, after its warning.
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/List.h>
#include <ATen/ops/_to_copy.h>
#include <c10/util/Exception.h>

#include "lazy/dtype_widening.h"
#include "lazy/tracer.h"

namespace torch_neuron::lazy {
namespace {

// `self` converted to `dtype` as a traced op. The kernels run below
// functionalization, where results stay unwrapped (the _to_copy kernel wraps
// its result for the callers above it).
at::Tensor ConvertBelowFunctionalization(const at::Tensor& self, c10::ScalarType dtype) {
  at::Tensor converted = at::_to_copy(self, dtype);
  return at::functionalization::impl::isFunctionalTensor(converted)
             ? at::functionalization::impl::from_functional_tensor(converted)
             : converted;
}

}  // namespace

// histc(self, bins, min, max) of an integral (or bool) tensor: binned in float64,
// exact for integers below 2**53, counted in self's dtype as CUDA returns them.
void HistcOfIntegers(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t base = stack->size() - op.schema().arguments().size();
  const at::Tensor self = (*stack)[base].toTensor();
  if (!c10::isIntegralType(self.scalar_type(), /*includeBool=*/true)) {
    TraceOp(op, stack);
    return;
  }
  (*stack)[base] = ConvertBelowFunctionalization(self, at::kDouble);
  TraceOp(op, stack);
  at::Tensor counts = torch::jit::pop(*stack).toTensor();
  torch::jit::push(*stack, ConvertBelowFunctionalization(counts, self.scalar_type()));
}

void IndexPutOfByteMasks(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t base = stack->size() - arguments.size();
  size_t slot = 0;
  while (slot < arguments.size() && arguments[slot].name() != "indices") ++slot;
  TORCH_INTERNAL_ASSERT(slot < arguments.size(), op.schema().name(), " has no indices argument");
  c10::List<std::optional<at::Tensor>> indices;
  bool byte_mask = false;
  for (const c10::IValue& e : (*stack)[base + slot].toListRef()) {
    std::optional<at::Tensor> index;
    if (e.isTensor() && e.toTensor().defined()) {
      index = e.toTensor();
      if (index->scalar_type() == at::kByte) {
        // The CPU's words (ATen's expandTensors), once per mask as it warns.
        TORCH_WARN(
            "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.");
        index = ConvertBelowFunctionalization(*index, at::kBool);
        byte_mask = true;
      }
    }
    indices.push_back(std::move(index));
  }
  if (byte_mask) (*stack)[base + slot] = std::move(indices);
  TraceOp(op, stack);
}

}  // namespace torch_neuron::lazy

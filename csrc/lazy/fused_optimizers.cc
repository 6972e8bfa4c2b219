#include "lazy/fused_optimizers.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>

#include <string>
#include <string_view>
#include <vector>

#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {
namespace {

constexpr std::string_view kFusedPrefix = "aten::_fused_";

// The in-place op of a functional fused step, or the functional op of an
// in-place one: the same name with or without the trailing '_', same overload.
c10::OperatorHandle Counterpart(const c10::OperatorHandle& op, bool to_functional) {
  const c10::OperatorName& name = op.operator_name();
  std::string other = name.name;
  if (to_functional) {
    TORCH_INTERNAL_ASSERT(!other.empty() && other.back() == '_', other, " is not an in-place op");
    other.pop_back();
  } else {
    other.push_back('_');
  }
  return c10::Dispatcher::singleton().findSchemaOrThrow(other.c_str(), name.overload_name.c_str());
}

bool Writes(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

// The overload that takes the learning rate as a tensor, with `args` changed
// to match: a Python number wrapped as a tensor is a scalar parameter of the
// graph, where a float argument is an attribute, part of the graph's key. A
// learning rate schedule changes it every step (transformers' Trainer), and
// each value would compile a graph of its own. The CPU's tensor-lr kernels read
// the value back as the same double.
c10::OperatorHandle WithTensorLr(const c10::OperatorHandle& op, std::vector<c10::IValue>* args) {
  const c10::OperatorName& name = op.operator_name();
  if (!name.overload_name.empty()) return op;
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() != "lr" || !(*args)[i].isDouble()) continue;
    at::Tensor lr = at::scalar_to_tensor((*args)[i].toDouble());
    lr.unsafeGetTensorImpl()->set_wrapped_number(true);
    (*args)[i] = std::move(lr);
    return c10::Dispatcher::singleton().findSchemaOrThrow(name.name.c_str(), "tensor_lr");
  }
  return op;
}

}  // namespace

// AutogradPrivateUse1 kernel of the in-place fused steps (see the header).
void FusedStepOnNeuron(const c10::OperatorHandle& called, c10::DispatchKeySet /*keys*/,
                       torch::jit::Stack* stack) {
  const size_t n = called.schema().arguments().size();
  std::vector<c10::IValue> args(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  torch::jit::drop(*stack, n);
  const c10::OperatorHandle op = WithTensorLr(called, &args);
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  // Below autograd (the ops have no derivative), above functionalization,
  // which turns the copies into new values of the written tensors; copy_
  // bumps their version counters at ADInplaceOrView as the in-place op would.
  at::AutoDispatchBelowAutograd below_autograd;
  torch::jit::Stack call(args.begin(), args.end());
  Counterpart(op, /*to_functional=*/true).callBoxed(&call);
  size_t r = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!Writes(arguments[i])) continue;
    TORCH_INTERNAL_ASSERT(r < call.size(), op.operator_name(), ": its functional form returns too few lists");
    const std::vector<at::Tensor> written = args[i].toTensorVector();
    const std::vector<at::Tensor> results = call[r++].toTensorVector();
    TORCH_INTERNAL_ASSERT(written.size() == results.size(), op.operator_name(), ": a result list of ",
                          results.size(), " tensors for an argument of ", written.size());
    for (size_t k = 0; k < written.size(); ++k) written[k].copy_(results[k]);
  }
}

std::optional<MetaResult> FusedStepMeta(const c10::OperatorHandle& op, const torch::jit::Stack& args) {
  const c10::OperatorName& name = op.operator_name();
  if (name.name.compare(0, kFusedPrefix.size(), kFusedPrefix) != 0 || name.name.back() == '_')
    return std::nullopt;
  if (op.schema().returns().empty()) return std::nullopt;  // the .out overloads
  const c10::OperatorHandle in_place = Counterpart(op, /*to_functional=*/false);
  const std::vector<c10::Argument>& arguments = in_place.schema().arguments();
  MetaResult result;
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (!Writes(arguments[i])) continue;
    const std::vector<at::Tensor> list = args[i].toTensorVector();
    for (const at::Tensor& t : list) {
      result.shapes.emplace_back(t.scalar_type(), t.sizes().vec());
      result.layouts.push_back(TensorLayout::Of(t));
    }
    result.counts.push_back(static_cast<int>(list.size()));
  }
  if (result.counts.size() != op.schema().returns().size()) return std::nullopt;
  return result;
}

}  // namespace torch_neuron::lazy

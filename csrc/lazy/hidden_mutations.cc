#include "lazy/hidden_mutations.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/_native_batch_norm_legit.h>

#include <tuple>

#include "lazy/bridge.h"

namespace torch_neuron::lazy {
namespace {

// `target` takes `source`'s value (pending or materialized).
void Assign(const at::Tensor& target, const at::Tensor& source) {
  LazyTensorPtr from = GetLazy(source);
  LazyTensorPtr to = GetLazy(target);
  if (from->is_pending()) {
    to->SetPending(from->pending());
  } else {
    to->SetData(from->data());
  }
}

}  // namespace

bool HasHiddenMutation(const std::string& name) { return name == "aten::native_batch_norm"; }

bool TraceHiddenMutation(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
  const size_t num_args = op.schema().arguments().size();
  const size_t base = stack->size() - num_args;
  const c10::IValue& mean = (*stack)[base + 3];
  const c10::IValue& var = (*stack)[base + 4];
  const bool training = (*stack)[base + 5].toBool();
  if (!training || !mean.isTensor() || !var.isTensor() || !IsNeuron(mean.toTensor()) ||
      !IsNeuron(var.toTensor())) {
    return false;
  }
  const at::Tensor input = (*stack)[base].toTensor();
  const std::optional<at::Tensor> weight = (*stack)[base + 1].toOptional<at::Tensor>();
  const std::optional<at::Tensor> bias = (*stack)[base + 2].toOptional<at::Tensor>();
  const at::Tensor running_mean = mean.toTensor();
  const at::Tensor running_var = var.toTensor();
  const double momentum = (*stack)[base + 6].toDouble();
  const double eps = (*stack)[base + 7].toDouble();
  at::Tensor out, save_mean, save_invstd, new_mean, new_var;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    std::tie(out, save_mean, save_invstd, new_mean, new_var) = at::_native_batch_norm_legit_functional(
        input, weight, bias, running_mean, running_var, training, momentum, eps);
  }
  Assign(running_mean, new_mean);
  Assign(running_var, new_var);
  torch::jit::drop(*stack, num_args);
  stack->push_back(out);
  stack->push_back(save_mean);
  stack->push_back(save_invstd);
  return true;
}

}  // namespace torch_neuron::lazy

// Fused optimizer steps on neuron: torch.optim's fused=True path
// (_fused_adam_, _fused_adamw_, _fused_sgd_, _fused_adagrad_ and their
// tensor-lr overloads), which transformers' default optimizer takes.
//
// PyTorch's functionalization cannot take these in-place list ops as they
// are: it refuses a call whose optional list (Adam's max_exp_avg_sqs without
// amsgrad) is empty, and the SGD and Adagrad ones have no Meta kernel for its
// meta reference run. So at neuron's own autograd key (AutogradPrivateUse1;
// the ops have no derivative) the in-place call becomes its functional form,
// traced as one node that runs the CPU's fused kernel, whose results are
// copied back into the arguments the in-place op writes. The results equal
// the CPU's fused step bit for bit, and other devices never see these kernels.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>

#include "lazy/cpu_parity_rules.h"

namespace torch_neuron::lazy {

// The output metadata of a fused step's functional form (aten::_fused_adamw,
// ...): a list like each argument its in-place form writes, in order. Nullopt
// for any other op. These forms have no Meta kernel (or a Python one): the
// tracer asks here first.
std::optional<MetaResult> FusedStepMeta(const c10::OperatorHandle& op, const torch::jit::Stack& args);

// The AutogradPrivateUse1 kernel of every fused step (boxed): the in-place
// call as its functional form, traced as one node, written back.
void FusedStepOnNeuron(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

}  // namespace torch_neuron::lazy

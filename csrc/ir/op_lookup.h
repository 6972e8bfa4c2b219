// Resolving operator names ("aten::add.Tensor") to dispatcher handles, when a
// program is built or loaded, and turning traced attributes into the values the
// host kernels take.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace torch_neuron::ir {

// "aten::add.Tensor" -> the handle of aten::add, overload Tensor. Cached.
absl::StatusOr<c10::OperatorHandle> FindOperator(const std::string& op);

// A traced attribute as the host kernel takes it: a neuron device becomes the CPU
// (the emulated device's kernels run on the host).
c10::IValue HostAttr(const c10::IValue& attr);

}  // namespace torch_neuron::ir

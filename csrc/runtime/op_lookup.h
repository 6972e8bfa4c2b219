// Resolving operator names ("aten::add.Tensor") to dispatcher handles, when a
// program is built or loaded, and turning traced attributes into the values the
// host kernels take.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace torch_neuron::runtime {

// "aten::add.Tensor" -> the handle of aten::add, overload Tensor. Cached.
absl::StatusOr<c10::OperatorHandle> FindOperator(const std::string& op);

// The operator a program instruction for traced op `op` calls. Functionalization
// records every view as a copying op (view_copy, t_copy, expand_copy, ...). In
// a program no value is written in place (an argument an op writes is copied
// first, and the executor gives outputs that alias inputs memory of their own),
// so those run as the views themselves: the same values, no copy. view_copy
// runs as reshape, since its input may itself be a strided view there.
absl::StatusOr<c10::OperatorHandle> FindExecutableOperator(const std::string& op);

// The traced ops FindExecutableOperator runs as views, with their view forms.
const std::vector<std::pair<std::string, std::string>>& ViewForms();

// A traced attribute as the host kernel takes it: a neuron device becomes the CPU
// (the emulated device's kernels run on the host).
c10::IValue HostAttr(const c10::IValue& attr);

}  // namespace torch_neuron::runtime

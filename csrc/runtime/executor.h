// Executor: runs a Program on the emulated device. The operator calls run as
// ATen CPU kernels over the device's memory (the emulation's compute engine).
// Thread-safe: a Program is immutable; each call has its own registers.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/statusor.h"
#include "runtime/program.h"

namespace torch_neuron::runtime {

// `parameters[i]` binds parameter i: a CPU tensor (a device buffer's view), a
// Scalar, or a neuron Generator. Returns the outputs as contiguous CPU tensors of
// the declared dtypes and sizes, never sharing memory with a parameter. An operator that throws gives an INTERNAL error
// naming the operator and, when recorded, its source line.
absl::StatusOr<std::vector<at::Tensor>> Execute(const Program& program,
                                                const std::vector<c10::IValue>& parameters);

}  // namespace torch_neuron::runtime

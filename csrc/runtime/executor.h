// Executor: runs a Program on the emulated device. The operator calls run as
// ATen CPU kernels over the device's memory (the emulation's compute engine).
// Thread-safe: a Program is immutable; each call has its own registers.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/program.h"

namespace torch_neuron::runtime {

// `parameters[i]` binds parameter i: a CPU tensor (a device buffer's view), a
// Scalar, or a neuron Generator. Returns the outputs as contiguous CPU tensors of
// the declared dtypes and sizes. An operator that throws gives the Status of
// its exception (runtime/torch_status.h: the same Python type raises again)
// naming the operator and, when recorded, its source line.
//
// Outputs never share memory with a parameter, except through donation:
// `donated[i]` (when given) says parameter i's buffer is the caller's to
// overwrite. A fused kernel that is the last reader of a donated buffer, with no
// other view of it alive, writes one of its outputs into it instead of new
// memory. `in_place[i]` (when given) is then the index of the output returned in
// parameter i's buffer (one that lists parameter i among its donation
// candidates), or -1; the caller takes the buffer for that output. Which
// parameters are donated is runtime/launch.h's decision.
// `source` is the user's line errors name ("": none); without it they name
// the lines the program was compiled with. A cached program serves every graph
// of its hash, wherever it was traced, so only the caller knows which line is
// the one running now.
absl::StatusOr<std::vector<at::Tensor>> Execute(const Program& program,
                                                const std::vector<c10::IValue>& parameters,
                                                const std::vector<bool>& donated = {},
                                                std::vector<int>* in_place = nullptr,
                                                const std::string* source = nullptr);

}  // namespace torch_neuron::runtime

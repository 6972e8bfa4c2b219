// Running a program's calls of generated kernels (program.h KernelCall): the
// executor gathers the call's tensors and scalars from its registers and runs
// it here, on CPU tensors (the emulated device's memory), splitting large calls
// across the kernel team.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/program.h"

namespace torch_neuron::runtime {

// Checks that a call's fields agree with one another (counts, dtypes, extents,
// output sizes), as the NEFF reader and the compiler need before a call may run.
absl::Status ValidateKernelCall(const KernelCall& call);

// Runs `call` on `inputs` (one per call.inputs, of its dtypes and sizes) and
// `scalars`. reuse[k] >= 0 writes flat output k into input reuse[k]'s buffer
// (contiguous, of the output's dtype, given up by the caller); empty: every
// output is new. INTERNAL when the inputs do not match the call, NOT_FOUND or
// FAILED_PRECONDITION when the kernel cannot be loaded. Allocation failures
// and kernels' own checks throw (c10::Error), as an ATen call's do.
absl::StatusOr<std::vector<at::Tensor>> RunKernelCall(const KernelCall& call,
                                                      const std::vector<at::Tensor>& inputs,
                                                      const std::vector<double>& scalars,
                                                      const std::vector<int64_t>& reuse);

}  // namespace torch_neuron::runtime

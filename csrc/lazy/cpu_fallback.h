// The CPU fallback of the lazy device: materializes an op's neuron inputs, runs
// the CPU kernel, and uploads the results as device data. Counted per op
// ("fallback.aten::nonzero"); with TORCH_NEURON_FALLBACK=0 it raises instead.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "base/config.h"

namespace torch_neuron::lazy {

// `reason` says why the op could not be traced (for the error with fallback
// off); `trace` is the tracer's settings for this op (allow_cpu_fallback).
void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason,
                 const TraceConfig& trace);

// What a user is told when a sparse tensor would reach the device.
inline constexpr char kSparseUnsupported[] =
    "sparse layouts are not supported on neuron: neuron tensors are dense (strided). Keep sparse "
    "tensors on the CPU (x.cpu().to_sparse()), or use x.to_dense() before moving them to neuron";

// "aten::add.Tensor" for the schema of `op`.
std::string OpName(const c10::OperatorHandle& op);

}  // namespace torch_neuron::lazy

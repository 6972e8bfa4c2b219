// The layouts the CPU's convolution kernels give their results. The Meta
// kernel of aten::convolution always answers contiguous (a meta tensor names no
// backend), and the one of convolution_backward follows the GPU backends; the
// CPU instead picks a backend (oneDNN, the slow 2-d kernels, NNPACK, the 3-d
// ones) from the call's sizes, dtypes and settings, and that backend lays its
// results out channels_last where the input or the weight suggests it. These
// fix-ups (cpu_parity_rules.h, MetaFixup) ask ATen's own backend choice on
// storage-less stand-ins of the CPU tensors the call would get, and lay the
// results out as that backend does.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include "lazy/cpu_parity_rules.h"

namespace torch_neuron::lazy {

// aten::convolution and aten::_convolution: the output's layout.
void CpuConvolutionLayout(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                          MetaResult* result);

// aten::convolution_backward: grad_input's and grad_weight's layouts.
void CpuConvolutionBackwardLayout(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                                  MetaResult* result);

}  // namespace torch_neuron::lazy

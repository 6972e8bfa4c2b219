// Tensor asserts as graph ops. A check of a tensor's value
// (aten::_assert_async: F.one_hot's range checks in its decomposition, MoE
// routers' expert masks) has to read the value, which a graph that must stay
// one program (a torch.compile region, a captured step) cannot do while it is
// traced. There the tracer records it as neuron::assert_async instead
// (lazy/tracer.cc), an op of the program: its host kernel runs the CPU's check
// when the graph runs and returns the condition as a bool tensor, an extra
// output of the program. A failed check is the graph's execution error, as
// CUDA's device-side asserts are asynchronous: every output of that run fails
// with the assert's message, so a read of any of them raises it, and so does
// the next sync of the device (lazy/graph_executor.h); nothing computed from a
// failed run is ever read as a value.
//
// An assert has no result anyone reads, so the tracer runs each exactly once,
// as it does random draws and collectives.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>

namespace torch_neuron::runtime {

// neuron::assert_async(Tensor self, str? msg) -> Tensor: raises what
// aten::_assert_async(self[, msg]) raises on the CPU, else returns self != 0
// (a bool tensor of self's one element and shape).
// Schema, registered with neuron's other ops (csrc/aten/registration.cc).
inline constexpr std::string_view kDeviceAssertOp = "neuron::assert_async";
inline constexpr const char* kDeviceAssertSchema = "assert_async(Tensor self, str? msg=None) -> Tensor";

// Host kernel: the CPU's own check (its message and exception type), then self != 0.
at::Tensor AssertAsync(const at::Tensor& self, std::optional<c10::string_view> msg);
// Meta kernel: a bool tensor of self's shape.
at::Tensor AssertAsyncMeta(const at::Tensor& self, std::optional<c10::string_view> msg);

}  // namespace torch_neuron::runtime

// The CPU kernels' own argument checks, by op name, with the CPU's messages
// (part of the component in cpu_parity.h): parameter ranges, dtype pairs an op
// refuses, shapes its kernel checks (index_put's, embedding_bag's), reductions
// over an empty dim, the 64-dim limit of dim masks. Each reads the arguments'
// metadata only, so it runs on the meta copies neuron's Meta kernels get.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string_view>

namespace torch_neuron::lazy {

// One call's boxed arguments: stack[base + i] is the schema's argument i.
struct CallArgs {
  const c10::OperatorHandle& op;
  const torch::jit::Stack& stack;
  size_t base;

  // The argument named `name`, or nullptr where the schema has none.
  const c10::IValue* Get(std::string_view name) const;
  // Argument `i`.
  const c10::IValue& At(size_t i) const { return stack[base + i]; }
};

using KernelCheck = void (*)(const CallArgs& call);

// The check of `op` (every overload of a checked name; in-place forms have
// their own where the CPU checks them otherwise), or nullptr.
KernelCheck KernelCheckFor(const c10::OperatorHandle& op);

}  // namespace torch_neuron::lazy

// neuron::fused_kernel: the operator through which a tier-1 program calls one
// of its generated kernels. It is an ordinary operator on CPU tensors (the
// emulated device's memory), so a fused instruction is an ordinary program
// instruction: the NEFF format and its reader need no case of their own.
//
//   fused_kernel(str library, str kernel, Tensor[] inputs, Scalar[] scalars,
//                int[] sizes, int num_outputs, int[] reuse) -> Tensor[]
//
// Inputs are float32 tensors of `sizes`; the outputs are float32 tensors of
// `sizes`, new ones in device memory except where `reuse` names an input whose
// buffer an output is written into. Programs carry an empty `reuse`; the
// executor fills it in for donated inputs (runtime/executor.cc). Large kernels
// are split across the host's cores.
#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "runtime/native_library.h"
#include "runtime/neuron_allocator.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {
namespace {

// Below this many elements one thread does the whole kernel: starting threads
// would cost more than they save.
constexpr int64_t kMinElementsPerThread = 1 << 16;

// Threads split a call at multiples of this many elements (the generated loop's
// block, compiler::kKernelBlock), so no block straddles two threads.
constexpr int64_t kSplitQuantum = 512;

void FusedKernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  constexpr size_t kNumArgs = 7;
  const size_t base = stack->size() - kNumArgs;
  const std::string library((*stack)[base].toStringRef());
  const std::string kernel((*stack)[base + 1].toStringRef());
  const std::vector<at::Tensor> inputs = (*stack)[base + 2].toTensorVector();
  std::vector<double> scalars;
  for (const c10::IValue& s : (*stack)[base + 3].toListRef()) scalars.push_back(s.toScalar().toDouble());
  const std::vector<int64_t> sizes = (*stack)[base + 4].toIntVector();
  const int64_t num_outputs = (*stack)[base + 5].toInt();
  // reuse[k] >= 0: output k is written into input reuse[k]'s buffer, which the
  // caller no longer needs (the executor fills this in for donated parameters).
  const std::vector<int64_t> reuse = (*stack)[base + 6].toIntVector();

  KernelFn fn = ValueOrThrow(FindKernel(library, kernel));
  std::vector<const float*> in;
  std::vector<at::Tensor> contiguous;
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.sizes() == c10::IntArrayRef(sizes), "kernel ",
                kernel, " takes float32 inputs of sizes ", c10::IntArrayRef(sizes), ", got ",
                t.scalar_type(), " ", t.sizes());
    contiguous.push_back(t.contiguous());
    in.push_back(contiguous.back().data_ptr<float>());
  }
  std::vector<at::Tensor> outputs;
  std::vector<float*> out;
  for (int64_t i = 0; i < num_outputs; ++i) {
    const int64_t into = i < static_cast<int64_t>(reuse.size()) ? reuse[i] : -1;
    if (into >= 0) {
      TORCH_CHECK(into < static_cast<int64_t>(inputs.size()) && inputs[into].is_contiguous(), "kernel ",
                  kernel, ": output ", i, " cannot reuse input ", into);
      outputs.push_back(inputs[into]);
      out.push_back(const_cast<float*>(in[into]));
      continue;
    }
    // In device memory: the output's DeviceData adopts the buffer, no copy.
    outputs.push_back(at::detail::empty_generic(sizes, DeviceMemoryAsHostAllocator(),
                                                c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                at::kFloat, std::nullopt));
    out.push_back(outputs.back().data_ptr<float>());
  }
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const int64_t threads = std::clamp<int64_t>(numel / kMinElementsPerThread, 1,
                                              std::max(1u, std::thread::hardware_concurrency()));
  if (threads == 1) {
    fn(in.data(), out.data(), scalars.data(), 0, numel);
  } else {
    std::vector<std::thread> workers;
    const int64_t per_thread = (numel + threads - 1) / threads;
    const int64_t chunk = (per_thread + kSplitQuantum - 1) / kSplitQuantum * kSplitQuantum;
    for (int64_t t = 1; t < threads; ++t) {
      workers.emplace_back(fn, in.data(), out.data(), scalars.data(), t * chunk,
                           std::min(numel, (t + 1) * chunk));
    }
    fn(in.data(), out.data(), scalars.data(), 0, std::min(numel, chunk));
    for (std::thread& w : workers) w.join();
  }
  torch::jit::drop(*stack, kNumArgs);
  stack->push_back(c10::IValue(outputs));
}

}  // namespace

TORCH_LIBRARY(neuron, m) {
  m.def("fused_kernel(str library, str kernel, Tensor[] inputs, Scalar[] scalars, int[] sizes, "
        "int num_outputs, int[] reuse) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(neuron, CPU, m) {
  m.impl("fused_kernel", torch::CppFunction::makeFromBoxedFunction<&FusedKernel>());
}

}  // namespace torch_neuron::runtime

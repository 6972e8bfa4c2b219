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

// Runs `fn` over work items [0, total), split across the host's cores at
// multiples of `quantum` items when there are at least
// kMinElementsPerThread elements (`elements_per_item` each) per thread.
void RunSplit(KernelFn fn, const std::vector<const float*>& in, const std::vector<float*>& out,
              const std::vector<double>& scalars, int64_t total, int64_t quantum, int64_t elements_per_item) {
  const int64_t threads = std::clamp<int64_t>(total * elements_per_item / kMinElementsPerThread, 1,
                                              std::max(1u, std::thread::hardware_concurrency()));
  const int64_t per_thread = (total + threads - 1) / threads;
  const int64_t chunk = (per_thread + quantum - 1) / quantum * quantum;
  if (threads == 1 || chunk >= total) {
    fn(in.data(), out.data(), scalars.data(), 0, total);
    return;
  }
  std::vector<std::thread> workers;
  for (int64_t begin = chunk; begin < total; begin += chunk) {
    workers.emplace_back(fn, in.data(), out.data(), scalars.data(), begin, std::min(total, begin + chunk));
  }
  fn(in.data(), out.data(), scalars.data(), 0, chunk);
  for (std::thread& w : workers) w.join();
}

std::vector<double> ScalarValues(const c10::IValue& list) {
  std::vector<double> scalars;
  for (const c10::IValue& s : list.toListRef()) scalars.push_back(s.toScalar().toDouble());
  return scalars;
}

at::Tensor DeviceTensor(c10::IntArrayRef sizes) {
  // In device memory: the output's DeviceData adopts the buffer, no copy.
  return at::detail::empty_generic(sizes, DeviceMemoryAsHostAllocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::CPU), at::kFloat, std::nullopt);
}

void FusedKernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  constexpr size_t kNumArgs = 7;
  const size_t base = stack->size() - kNumArgs;
  const std::string library((*stack)[base].toStringRef());
  const std::string kernel((*stack)[base + 1].toStringRef());
  const std::vector<at::Tensor> inputs = (*stack)[base + 2].toTensorVector();
  const std::vector<double> scalars = ScalarValues((*stack)[base + 3]);
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
    outputs.push_back(DeviceTensor(sizes));
    out.push_back(outputs.back().data_ptr<float>());
  }
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  RunSplit(fn, in, out, scalars, numel, kSplitQuantum, 1);
  torch::jit::drop(*stack, kNumArgs);
  stack->push_back(c10::IValue(outputs));
}

// neuron::fused_row_kernel: a row kernel over `rows` rows of `row_length`
// elements. input_extents[i] says how much of input i the kernel reads (0: a
// value per element, 1: per row, 2: per row position, 3: one value; see
// compiler::Extent); output_sizes holds each output's rank, then its sizes.
void FusedRowKernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  constexpr size_t kNumArgs = 8;
  const size_t base = stack->size() - kNumArgs;
  const std::string library((*stack)[base].toStringRef());
  const std::string kernel((*stack)[base + 1].toStringRef());
  const std::vector<at::Tensor> inputs = (*stack)[base + 2].toTensorVector();
  const std::vector<double> scalars = ScalarValues((*stack)[base + 3]);
  const int64_t rows = (*stack)[base + 4].toInt();
  const int64_t row_length = (*stack)[base + 5].toInt();
  const std::vector<int64_t> extents = (*stack)[base + 6].toIntVector();
  const std::vector<int64_t> output_sizes = (*stack)[base + 7].toIntVector();

  KernelFn fn = ValueOrThrow(FindKernel(library, kernel));
  TORCH_CHECK(extents.size() == inputs.size(), "kernel ", kernel, " takes ", extents.size(), " inputs, got ",
              inputs.size());
  std::vector<const float*> in;
  std::vector<at::Tensor> contiguous;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t expected[] = {rows * row_length, rows, row_length, 1};
    TORCH_CHECK(extents[i] >= 0 && extents[i] < 4 && inputs[i].scalar_type() == at::kFloat &&
                    inputs[i].numel() == expected[extents[i]],
                "kernel ", kernel, " input ", i, ": expected float32 of ", expected[std::clamp<int64_t>(extents[i], 0, 3)],
                " elements, got ", inputs[i].scalar_type(), " ", inputs[i].sizes());
    contiguous.push_back(inputs[i].contiguous());
    in.push_back(contiguous.back().data_ptr<float>());
  }
  std::vector<at::Tensor> outputs;
  std::vector<float*> out;
  for (size_t at = 0; at < output_sizes.size();) {
    const int64_t rank = output_sizes[at];
    TORCH_CHECK(rank >= 0 && at + 1 + rank <= output_sizes.size(), "kernel ", kernel, ": bad output sizes");
    const std::vector<int64_t> sizes(output_sizes.begin() + at + 1, output_sizes.begin() + at + 1 + rank);
    at += 1 + rank;
    outputs.push_back(DeviceTensor(sizes));
    TORCH_CHECK(outputs.back().numel() == rows || outputs.back().numel() == rows * row_length, "kernel ", kernel,
                ": an output of ", c10::IntArrayRef(sizes), " is neither per row nor per element");
    out.push_back(outputs.back().data_ptr<float>());
  }
  RunSplit(fn, in, out, scalars, rows, 1, row_length);
  torch::jit::drop(*stack, kNumArgs);
  stack->push_back(c10::IValue(outputs));
}

}  // namespace

TORCH_LIBRARY(neuron, m) {
  m.def("fused_kernel(str library, str kernel, Tensor[] inputs, Scalar[] scalars, int[] sizes, "
        "int num_outputs, int[] reuse) -> Tensor[]");
  m.def("fused_row_kernel(str library, str kernel, Tensor[] inputs, Scalar[] scalars, int rows, "
        "int row_length, int[] input_extents, int[] output_sizes) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(neuron, CPU, m) {
  m.impl("fused_kernel", torch::CppFunction::makeFromBoxedFunction<&FusedKernel>());
  m.impl("fused_row_kernel", torch::CppFunction::makeFromBoxedFunction<&FusedRowKernel>());
}

}  // namespace torch_neuron::runtime

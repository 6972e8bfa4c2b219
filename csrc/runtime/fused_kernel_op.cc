// neuron::fused_kernel: the operator through which a tier-1 program calls one
// of its generated kernels. It is an ordinary operator on CPU tensors (the
// emulated device's memory), so a fused instruction is an ordinary program
// instruction: the NEFF format and its reader need no case of their own.
//
//   fused_kernel(str library, str kernel, Tensor[] inputs, Scalar[] scalars,
//                int[] sizes, int num_outputs, int[] reuse, int[] bool_inputs,
//                int[] bool_outputs) -> Tensor[]
//
// Inputs are tensors of `sizes`, float32 except those bool_inputs names; the
// outputs are tensors of `sizes` (bool where bool_outputs says), new ones in
// device memory except where `reuse` names a float32 input whose buffer an
// output is written into. Programs carry an empty `reuse`; the executor fills
// it in for donated inputs (runtime/executor.cc). Large kernels are split
// across ATen's intra-op threads. neuron::fused_row_kernel is its counterpart for row
// kernels (below).
#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <algorithm>
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

// Runs `fn` over work items [0, total), split at multiples of `quantum` items
// across ATen's intra-op thread pool (torch.get_num_threads() threads) when
// there are at least kMinElementsPerThread elements (`elements_per_item` each)
// per thread. The pool's threads persist: a thread started per call cost an
// AdamW step about 2 ms after the host had been idle a moment (bench_adamw's
// interleaved peers).
void RunSplit(KernelFn fn, const std::vector<const float*>& in, const std::vector<float*>& out,
              const std::vector<double>& scalars, int64_t total, int64_t quantum, int64_t elements_per_item) {
  const int64_t threads =
      std::clamp<int64_t>(total * elements_per_item / kMinElementsPerThread, 1, at::get_num_threads());
  const int64_t per_thread = (total + threads - 1) / threads;
  const int64_t chunk = (per_thread + quantum - 1) / quantum * quantum;
  if (threads == 1 || chunk >= total) {
    fn(in.data(), out.data(), scalars.data(), 0, total);
    return;
  }
  const int64_t pieces = (total + chunk - 1) / chunk;
  at::parallel_for(0, pieces, /*grain_size=*/1, [&](int64_t first, int64_t last) {
    for (int64_t piece = first; piece < last; ++piece) {
      fn(in.data(), out.data(), scalars.data(), piece * chunk, std::min(total, (piece + 1) * chunk));
    }
  });
}

std::vector<double> ScalarValues(const c10::IValue& list) {
  std::vector<double> scalars;
  for (const c10::IValue& s : list.toListRef()) scalars.push_back(s.toScalar().toDouble());
  return scalars;
}

// Which of `count` inputs or outputs hold bool, from a list of their positions.
std::vector<bool> BoolPositions(const c10::IValue& list, size_t count, const std::string& kernel) {
  std::vector<bool> is_bool(count, false);
  for (int64_t i : list.toIntVector()) {
    TORCH_CHECK(i >= 0 && static_cast<size_t>(i) < count, "kernel ", kernel, ": bad bool position ", i);
    is_bool[i] = true;
  }
  return is_bool;
}

at::ScalarType DtypeOf(bool is_bool) { return is_bool ? at::kBool : at::kFloat; }

// The arguments both kernel operators start with (library, kernel, inputs,
// scalars, at stack[base]...) and the kernel they name.
struct KernelCall {
  KernelCall(const torch::jit::Stack& stack, size_t base)
      : kernel(stack[base + 1].toStringRef()),
        inputs(stack[base + 2].toTensorVector()),
        scalars(ScalarValues(stack[base + 3])),
        fn(ValueOrThrow(FindKernel(stack[base].toStringRef(), kernel))) {}

  // Makes input i contiguous and records its data.
  void AddInput(size_t i) {
    contiguous.push_back(inputs[i].contiguous());
    in.push_back(static_cast<const float*>(contiguous.back().const_data_ptr()));
  }
  // A new output in device memory: the output's DeviceData adopts the buffer, no copy.
  void AddOutput(c10::IntArrayRef sizes, bool is_bool) {
    outputs.push_back(at::detail::empty_generic(sizes, DeviceMemoryAsHostAllocator(),
                                                c10::DispatchKeySet(c10::DispatchKey::CPU), DtypeOf(is_bool),
                                                std::nullopt));
    out.push_back(static_cast<float*>(outputs.back().data_ptr()));
  }
  void Finish(torch::jit::Stack* stack, size_t num_args) {
    torch::jit::drop(*stack, num_args);
    stack->push_back(c10::IValue(outputs));
  }

  const std::string kernel;
  const std::vector<at::Tensor> inputs;
  const std::vector<double> scalars;
  const KernelFn fn;
  std::vector<at::Tensor> contiguous;  // keeps the inputs' data alive
  std::vector<const float*> in;
  std::vector<at::Tensor> outputs;
  std::vector<float*> out;
};

void FusedKernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  constexpr size_t kNumArgs = 9;
  const size_t base = stack->size() - kNumArgs;
  KernelCall call(*stack, base);
  const std::vector<int64_t> sizes = (*stack)[base + 4].toIntVector();
  const int64_t num_outputs = (*stack)[base + 5].toInt();
  // reuse[k] >= 0: output k is written into input reuse[k]'s buffer, which the
  // caller no longer needs (the executor fills this in for donated parameters).
  const std::vector<int64_t> reuse = (*stack)[base + 6].toIntVector();
  const std::vector<bool> bool_in = BoolPositions((*stack)[base + 7], call.inputs.size(), call.kernel);
  const std::vector<bool> bool_out = BoolPositions((*stack)[base + 8], num_outputs, call.kernel);

  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const at::Tensor& t = call.inputs[i];
    TORCH_CHECK(t.scalar_type() == DtypeOf(bool_in[i]) && t.sizes() == c10::IntArrayRef(sizes), "kernel ",
                call.kernel, " input ", i, ": expected ", DtypeOf(bool_in[i]), " of sizes ", c10::IntArrayRef(sizes),
                ", got ", t.scalar_type(), " ", t.sizes());
    call.AddInput(i);
  }
  for (int64_t i = 0; i < num_outputs; ++i) {
    const int64_t into = i < static_cast<int64_t>(reuse.size()) ? reuse[i] : -1;
    if (into < 0) {
      call.AddOutput(sizes, bool_out[i]);
      continue;
    }
    TORCH_CHECK(into < static_cast<int64_t>(call.inputs.size()) && call.inputs[into].is_contiguous() &&
                    !bool_in[into] && !bool_out[i],
                "kernel ", call.kernel, ": output ", i, " cannot reuse input ", into);
    call.outputs.push_back(call.inputs[into]);
    call.out.push_back(const_cast<float*>(call.in[into]));
  }
  RunSplit(call.fn, call.in, call.out, call.scalars, c10::multiply_integers(sizes), kSplitQuantum, 1);
  call.Finish(stack, kNumArgs);
}

// neuron::fused_row_kernel: a row kernel over `rows` rows of `row_length`
// elements. input_extents[i] says how much of input i the kernel reads (0: a
// value per element, 1: per row, 2: per row position, 3: one value; see
// compiler::Extent); output_sizes holds each output's rank, then its sizes.
void FusedRowKernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  constexpr size_t kNumArgs = 10;
  const size_t base = stack->size() - kNumArgs;
  KernelCall call(*stack, base);
  const int64_t rows = (*stack)[base + 4].toInt();
  const int64_t row_length = (*stack)[base + 5].toInt();
  const std::vector<int64_t> extents = (*stack)[base + 6].toIntVector();
  const std::vector<int64_t> output_sizes = (*stack)[base + 7].toIntVector();
  const std::vector<bool> bool_in = BoolPositions((*stack)[base + 8], call.inputs.size(), call.kernel);

  TORCH_CHECK(extents.size() == call.inputs.size(), "kernel ", call.kernel, " takes ", extents.size(),
              " inputs, got ", call.inputs.size());
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const int64_t expected[] = {rows * row_length, rows, row_length, 1};
    const int64_t numel = expected[std::clamp<int64_t>(extents[i], 0, 3)];
    const at::Tensor& t = call.inputs[i];
    TORCH_CHECK(extents[i] >= 0 && extents[i] < 4 && t.scalar_type() == DtypeOf(bool_in[i]) && t.numel() == numel,
                "kernel ", call.kernel, " input ", i, ": expected ", DtypeOf(bool_in[i]), " of ", numel,
                " elements, got ", t.scalar_type(), " ", t.sizes());
    call.AddInput(i);
  }
  std::vector<std::vector<int64_t>> shapes;  // per output
  for (size_t at = 0; at < output_sizes.size();) {
    const int64_t rank = output_sizes[at];
    TORCH_CHECK(rank >= 0 && at + 1 + rank <= output_sizes.size(), "kernel ", call.kernel, ": bad output sizes");
    shapes.emplace_back(output_sizes.begin() + at + 1, output_sizes.begin() + at + 1 + rank);
    at += 1 + rank;
  }
  const std::vector<bool> bool_out = BoolPositions((*stack)[base + 9], shapes.size(), call.kernel);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const int64_t numel = c10::multiply_integers(shapes[k]);
    TORCH_CHECK(numel == rows || numel == rows * row_length, "kernel ", call.kernel, ": an output of ",
                c10::IntArrayRef(shapes[k]), " is neither per row nor per element");
    call.AddOutput(shapes[k], bool_out[k]);
  }
  RunSplit(call.fn, call.in, call.out, call.scalars, rows, 1, row_length);
  call.Finish(stack, kNumArgs);
}

}  // namespace

TORCH_LIBRARY(neuron, m) {
  m.def("fused_kernel(str library, str kernel, Tensor[] inputs, Scalar[] scalars, int[] sizes, "
        "int num_outputs, int[] reuse, int[] bool_inputs, int[] bool_outputs) -> Tensor[]");
  m.def("fused_row_kernel(str library, str kernel, Tensor[] inputs, Scalar[] scalars, int rows, "
        "int row_length, int[] input_extents, int[] output_sizes, int[] bool_inputs, int[] bool_outputs) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(neuron, CPU, m) {
  m.impl("fused_kernel", torch::CppFunction::makeFromBoxedFunction<&FusedKernel>());
  m.impl("fused_row_kernel", torch::CppFunction::makeFromBoxedFunction<&FusedRowKernel>());
}

}  // namespace torch_neuron::runtime

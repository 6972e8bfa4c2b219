// neuron::fused_kernel: the operator through which a tier-1 program calls one
// of its generated kernels. It is an ordinary operator on CPU tensors (the
// emulated device's memory), so a fused instruction is an ordinary program
// instruction: the NEFF format and its reader need no case of their own.
//
//   fused_kernel(str library, str kernel, Tensor[] inputs, Scalar[] scalars,
//                int[] sizes, int num_outputs, int[] reuse, int[] input_dtypes,
//                int[] output_dtypes) -> Tensor[]
//
// Inputs are tensors of `sizes` and of input_dtypes (c10::ScalarType codes, one
// per input); the outputs are tensors of `sizes` and output_dtypes, new ones in
// device memory except where `reuse` names an input of the output's dtype whose
// buffer the output is written into. Programs carry an empty `reuse`; the
// executor fills it in for donated inputs (runtime/executor.cc). Inputs may be
// strided (a view run as a view); the kernel's strided path then reads them in
// place. Large kernels are split across ATen's intra-op threads.
// neuron::fused_row_kernel is its counterpart for row kernels (below), whose
// inputs are made contiguous.
#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "base/metrics.h"
#include "runtime/kernel_abi.h"
#include "runtime/kernel_team.h"
#include "runtime/native_library.h"
#include "runtime/neuron_allocator.h"
#include "runtime/torch_status.h"

namespace torch_neuron::runtime {
namespace {

// Below this many elements one thread does the whole kernel: starting threads
// would cost more than they save.
constexpr int64_t kMinElementsPerThread = 1 << 16;

// A split call has up to this many pieces per thread, of at least
// kMinElementsPerPiece elements each (see RunSplit).
constexpr int64_t kPiecesPerThread = 8;
constexpr int64_t kMinElementsPerPiece = 1 << 15;

namespace abi = kernel_abi;
namespace flat = kernel_abi::fused_kernel;
namespace row = kernel_abi::fused_row_kernel;
static_assert(flat::kLibrary == row::kLibrary && flat::kKernel == row::kKernel &&
                  flat::kInputs == row::kInputs && flat::kScalars == row::kScalars,
              "KernelCall reads the arguments both kernel operators start with");

// Runs `body(begin, end)` over work items [0, total), split at multiples of
// `quantum` items across the kernel team (KernelThreads() threads: the
// config's TORCH_NEURON_KERNEL_THREADS on a queue thread) when there are at
// least kMinElementsPerThread elements (`elements_per_item` each) per thread.
// Not ATen's intra-op pool: the queue thread's OpenMP team is one thread.
//
// The call is cut into up to kPiecesPerThread pieces per thread, claimed in
// turn, so a thread that gets less of its core finishes fewer pieces: after a
// CPU op, libgomp's idle workers spin for milliseconds on the cores the team
// wants, and with one piece per thread the call took as long as on one thread.
template <typename Body>
void RunSplit(const Body& body, int64_t total, int64_t quantum, int64_t elements_per_item) {
  const int64_t elements = total * elements_per_item;
  const int64_t threads = std::clamp<int64_t>(elements / kMinElementsPerThread, 1, KernelThreads());
  const int64_t pieces_wanted =
      std::clamp<int64_t>(elements / kMinElementsPerPiece, threads, threads * kPiecesPerThread);
  const int64_t per_piece = (total + pieces_wanted - 1) / pieces_wanted;
  const int64_t chunk = (per_piece + quantum - 1) / quantum * quantum;
  if (threads == 1 || chunk >= total) {
    body(0, total);
    return;
  }
  static metrics::Counter* const split_calls = metrics::GetCounter("kernel.split.count");
  split_calls->Add(1);
  const int64_t pieces = (total + chunk - 1) / chunk;
  KernelTeam::Global().Run(pieces, static_cast<int>(threads),
                           [&](int64_t piece) { body(piece * chunk, std::min(total, (piece + 1) * chunk)); });
}

std::vector<double> ScalarValues(const c10::IValue& list) {
  std::vector<double> scalars;
  for (const c10::IValue& s : list.toListRef()) scalars.push_back(s.toScalar().toDouble());
  return scalars;
}

// The dtypes of a kernel's `count` inputs or outputs, from their codes.
std::vector<at::ScalarType> Dtypes(const c10::IValue& list, size_t count, const std::string& kernel,
                                   const char* what) {
  const std::vector<int64_t> codes = list.toIntVector();
  TORCH_CHECK(codes.size() == count, "kernel ", kernel, ": ", codes.size(), " ", what, " dtypes for ", count,
              " ", what, "s");
  std::vector<at::ScalarType> dtypes;
  for (int64_t code : codes) {
    TORCH_CHECK(code >= 0 && code < static_cast<int64_t>(at::ScalarType::NumOptions), "kernel ", kernel,
                ": bad dtype code ", code);
    dtypes.push_back(static_cast<at::ScalarType>(code));
  }
  return dtypes;
}

// The arguments both kernel operators start with (library, kernel, inputs,
// scalars, at stack[base]...) and the kernel they name.
struct KernelCall {
  KernelCall(const torch::jit::Stack& stack, size_t base)
      : library(stack[base + flat::kLibrary].toStringRef()),
        kernel(stack[base + flat::kKernel].toStringRef()),
        inputs(stack[base + flat::kInputs].toTensorVector()),
        scalars(ScalarValues(stack[base + flat::kScalars])),
        fn(ValueOrThrow(FindKernel(library, kernel))) {}

  // Records input i's data: made contiguous, unless the kernel reads it
  // through its strides.
  void AddInput(size_t i, bool strided = false) {
    // A negated view (ATen's neg bit) holds its input's bytes: read values.
    const at::Tensor& input = inputs[i].is_neg() ? inputs[i].resolve_neg() : inputs[i];
    contiguous.push_back(strided ? input : input.contiguous());
    in.push_back(contiguous.back().const_data_ptr());
  }
  // Runs the kernel over [begin, end).
  void Run(int64_t begin, int64_t end) const { fn(in.data(), out.data(), scalars.data(), begin, end); }
  // A new output in device memory: the output's DeviceData adopts the buffer, no copy.
  void AddOutput(c10::IntArrayRef sizes, at::ScalarType dtype) {
    outputs.push_back(at::detail::empty_generic(sizes, DeviceMemoryAsHostAllocator(),
                                                c10::DispatchKeySet(c10::DispatchKey::CPU), dtype,
                                                std::nullopt));
    out.push_back(outputs.back().data_ptr());
  }
  void Finish(torch::jit::Stack* stack, size_t num_args) {
    torch::jit::drop(*stack, num_args);
    stack->push_back(c10::IValue(outputs));
  }

  const std::string library;
  const std::string kernel;
  const std::vector<at::Tensor> inputs;
  const std::vector<double> scalars;
  const KernelFn fn;
  std::vector<at::Tensor> contiguous;  // the inputs as the kernel reads them; keeps their data alive
  std::vector<const void*> in;
  std::vector<at::Tensor> outputs;
  std::vector<void*> out;
};

void FusedKernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  constexpr size_t kNumArgs = flat::kNumArgs;
  const size_t base = stack->size() - kNumArgs;
  KernelCall call(*stack, base);
  const std::vector<int64_t> sizes = (*stack)[base + flat::kSizes].toIntVector();
  const int64_t num_outputs = (*stack)[base + flat::kNumOutputs].toInt();
  // reuse[k] >= 0: output k is written into input reuse[k]'s buffer, which the
  // caller no longer needs (the executor fills this in for donated parameters).
  const std::vector<int64_t> reuse = (*stack)[base + flat::kReuse].toIntVector();
  const std::vector<at::ScalarType> in_dtypes =
      Dtypes((*stack)[base + flat::kInputDtypes], call.inputs.size(), call.kernel, "input");
  const std::vector<at::ScalarType> out_dtypes =
      Dtypes((*stack)[base + flat::kOutputDtypes], num_outputs, call.kernel, "output");

  // The strided general path reads an input that is not contiguous (a view run
  // as a view) through its strides, with no copy, where its innermost dim is
  // contiguous or broadcast (an expand, a slice, a permute of outer dims). A
  // transposed innermost dim is copied first: read in place, each element
  // would cost a cache line (a 2048 x 2048 transpose-add took 25 ms in
  // place, against 12 ms for ATen's copy and 3 ms for the contiguous kernel).
  const bool rank_fits = !sizes.empty() && static_cast<int64_t>(sizes.size()) <= abi::kMaxStridedRank;
  bool strided = false;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const at::Tensor& t = call.inputs[i];
    TORCH_CHECK(t.scalar_type() == in_dtypes[i] && t.sizes() == c10::IntArrayRef(sizes), "kernel ",
                call.kernel, " input ", i, ": expected ", in_dtypes[i], " of sizes ", c10::IntArrayRef(sizes),
                ", got ", t.scalar_type(), " ", t.sizes());
    const bool in_place =
        rank_fits && !t.is_contiguous() && (t.strides().back() <= 1 || t.sizes().back() == 1);
    strided |= in_place;
    call.AddInput(i, in_place);
  }
  for (int64_t i = 0; i < num_outputs; ++i) {
    const int64_t into = i < static_cast<int64_t>(reuse.size()) ? reuse[i] : -1;
    if (into < 0) {
      call.AddOutput(sizes, out_dtypes[i]);
      continue;
    }
    TORCH_CHECK(into < static_cast<int64_t>(call.inputs.size()) && call.inputs[into].is_contiguous() &&
                    in_dtypes[into] == out_dtypes[i],
                "kernel ", call.kernel, ": output ", i, " cannot reuse input ", into);
    call.outputs.push_back(call.inputs[into]);
    call.out.push_back(const_cast<void*>(call.in[into]));
  }
  const int64_t numel = c10::multiply_integers(sizes);
  if (strided) {
    static metrics::Counter* const strided_calls = metrics::GetCounter("kernel.strided.count");
    strided_calls->Add(1);
    const StridedKernelFn fn = ValueOrThrow(FindStridedKernel(call.library, call.kernel));
    std::vector<int64_t> geometry = {static_cast<int64_t>(sizes.size())};
    geometry.insert(geometry.end(), sizes.begin(), sizes.end());
    for (const at::Tensor& t : call.contiguous)
      geometry.insert(geometry.end(), t.strides().begin(), t.strides().end());
    RunSplit(
        [&](int64_t begin, int64_t end) {
          fn(call.in.data(), call.out.data(), call.scalars.data(), begin, end, geometry.data());
        },
        numel, abi::kKernelBlock, 1);
  } else {
    RunSplit([&](int64_t begin, int64_t end) { call.Run(begin, end); }, numel, abi::kKernelBlock, 1);
  }
  call.Finish(stack, kNumArgs);
}

// The values of extent code `code` in rows x row_length; -1 for a code that
// names no extent.
int64_t CodeNumel(int64_t code, int64_t rows, int64_t row_length) {
  if (code < 0 || code >= abi::kNumExtents) return -1;
  return abi::ExtentNumel(static_cast<abi::Extent>(code), rows, row_length);
}

// neuron::fused_row_kernel (kernel_abi.h has its layout and extent codes).
void FusedRowKernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  constexpr size_t kNumArgs = row::kNumArgs;
  const size_t base = stack->size() - kNumArgs;
  KernelCall call(*stack, base);
  const int64_t rows = (*stack)[base + row::kRows].toInt();
  const int64_t row_length = (*stack)[base + row::kRowLength].toInt();
  const std::vector<int64_t> extents = (*stack)[base + row::kInputExtents].toIntVector();
  const std::vector<int64_t> output_extents = (*stack)[base + row::kOutputExtents].toIntVector();
  const std::vector<int64_t> output_sizes = (*stack)[base + row::kOutputSizes].toIntVector();
  const std::vector<at::ScalarType> in_dtypes =
      Dtypes((*stack)[base + row::kInputDtypes], call.inputs.size(), call.kernel, "input");

  TORCH_CHECK(extents.size() == call.inputs.size(), "kernel ", call.kernel, " takes ", extents.size(),
              " inputs, got ", call.inputs.size());
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const int64_t numel = CodeNumel(extents[i], rows, row_length);
    const at::Tensor& t = call.inputs[i];
    TORCH_CHECK(numel >= 0 && t.scalar_type() == in_dtypes[i] && t.numel() == numel, "kernel ", call.kernel,
                " input ", i, ": expected ", in_dtypes[i], " of ", numel, " elements, got ", t.scalar_type(),
                " ", t.sizes());
    call.AddInput(i);
  }
  std::vector<std::vector<int64_t>> shapes;  // per output
  for (size_t at = 0; at < output_sizes.size();) {
    const int64_t rank = output_sizes[at];
    TORCH_CHECK(rank >= 0 && at + 1 + rank <= output_sizes.size(), "kernel ", call.kernel,
                ": bad output sizes");
    shapes.emplace_back(output_sizes.begin() + at + 1, output_sizes.begin() + at + 1 + rank);
    at += 1 + rank;
  }
  const std::vector<at::ScalarType> out_dtypes =
      Dtypes((*stack)[base + row::kOutputDtypes], shapes.size(), call.kernel, "output");
  TORCH_CHECK(output_extents.size() == shapes.size(), "kernel ", call.kernel, ": ", output_extents.size(),
              " output extents for ", shapes.size(), " outputs");
  bool by_columns = false;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const int64_t numel = c10::multiply_integers(shapes[k]);
    // A kernel stores per-element, per-row or per-position values, never one.
    TORCH_CHECK(output_extents[k] != static_cast<int64_t>(abi::Extent::kOne) &&
                    numel == CodeNumel(output_extents[k], rows, row_length),
                "kernel ", call.kernel, ": output ", k, " of ", c10::IntArrayRef(shapes[k]),
                " does not hold extent ", output_extents[k], " of ", rows, " rows of ", row_length);
    by_columns |= output_extents[k] == static_cast<int64_t>(abi::Extent::kColumn);
    call.AddOutput(shapes[k], out_dtypes[k]);
  }
  if (by_columns) {
    RunSplit([&](int64_t begin, int64_t end) { call.Run(begin, end); }, row_length, abi::kColumnBlock, rows);
  } else {
    RunSplit([&](int64_t begin, int64_t end) { call.Run(begin, end); }, rows, 1, row_length);
  }
  call.Finish(stack, kNumArgs);
}

}  // namespace

TORCH_LIBRARY(neuron, m) {
  m.def(kernel_abi::fused_kernel::kSchema);
  m.def(kernel_abi::fused_row_kernel::kSchema);
}

TORCH_LIBRARY_IMPL(neuron, CPU, m) {
  m.impl("fused_kernel", torch::CppFunction::makeFromBoxedFunction<&FusedKernel>());
  m.impl("fused_row_kernel", torch::CppFunction::makeFromBoxedFunction<&FusedRowKernel>());
}

}  // namespace torch_neuron::runtime

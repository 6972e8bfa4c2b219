// Running generated-kernel instructions (kernel_call.h). A flat call's inputs
// may be strided (a view run as a view): the kernel's strided path then reads
// them in place. A row call's inputs are made contiguous. Large calls are split
// across the kernel team.
#include "runtime/kernel_call.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "base/dtypes.h"
#include "runtime/kernel_abi.h"
#include "runtime/kernel_team.h"
#include "runtime/native_library.h"
#include "runtime/neuron_allocator.h"

namespace torch_neuron::runtime {
namespace {

namespace abi = kernel_abi;

// Below this many elements one thread does the whole kernel: starting threads
// would cost more than they save.
constexpr int64_t kMinElementsPerThread = 1 << 16;

// A split call has up to this many pieces per thread, of at least
// kMinElementsPerPiece elements each (see RunSplit).
constexpr int64_t kPiecesPerThread = 8;
constexpr int64_t kMinElementsPerPiece = 1 << 15;

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

// A dtype generated kernels load or store (the dtype table's kernel C type).
bool KernelDtype(c10::ScalarType dtype) {
  const DtypeFacts* facts = FactsOf(dtype);
  return facts != nullptr && facts->kernel_c_type != nullptr;
}

bool ValidExtent(abi::Extent e) { return static_cast<int64_t>(e) < abi::kNumExtents; }

// The product of `sizes`, or -1 when a size is negative or the product
// overflows.
int64_t Numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t d : sizes) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<int64_t>::max() / d)) return -1;
    n *= d;
  }
  return n;
}

absl::Status BadCall(const KernelCall& call, const std::string& what) {
  return absl::InternalError(absl::StrCat("kernel ", call.kernel, ": ", what));
}

// A call's inputs as the kernel reads them and its outputs as it writes them.
struct Buffers {
  std::vector<at::Tensor> inputs;  // the inputs as read; keeps their data alive
  std::vector<const void*> in;
  std::vector<at::Tensor> outputs;
  std::vector<void*> out;

  // Input `t`: made contiguous, unless the kernel reads it through its strides.
  void AddInput(const at::Tensor& t, bool strided) {
    // A negated view (ATen's neg bit) holds its input's bytes: read values.
    const at::Tensor& input = t.is_neg() ? t.resolve_neg() : t;
    inputs.push_back(strided ? input : input.contiguous());
    in.push_back(inputs.back().const_data_ptr());
  }
  // A new output in device memory: the output's DeviceData adopts the buffer, no copy.
  void AddOutput(c10::IntArrayRef sizes, at::ScalarType dtype) {
    outputs.push_back(at::detail::empty_generic(sizes, DeviceMemoryAsHostAllocator(),
                                                c10::DispatchKeySet(c10::DispatchKey::CPU), dtype,
                                                std::nullopt));
    out.push_back(outputs.back().data_ptr());
  }
};

absl::StatusOr<std::vector<at::Tensor>> RunFlat(const KernelCall& call, const std::vector<at::Tensor>& inputs,
                                                const std::vector<double>& scalars,
                                                const std::vector<int64_t>& reuse) {
  const std::vector<int64_t>& sizes = call.sizes;
  // The strided general path reads an input that is not contiguous (a view run
  // as a view) through its strides, with no copy, where its innermost dim is
  // contiguous or broadcast (an expand, a slice, a permute of outer dims). A
  // transposed innermost dim is copied first: read in place, each element
  // would cost a cache line (a 2048 x 2048 transpose-add took 25 ms in
  // place, against 12 ms for ATen's copy and 3 ms for the contiguous kernel).
  const bool rank_fits = !sizes.empty() && static_cast<int64_t>(sizes.size()) <= abi::kMaxStridedRank;
  bool strided = false;
  Buffers b;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (t.scalar_type() != call.input_dtypes[i] || t.sizes() != c10::IntArrayRef(sizes)) {
      return BadCall(call, absl::StrCat("input ", i, ": expected ", c10::toString(call.input_dtypes[i]),
                                        " of sizes ", c10::str(c10::IntArrayRef(sizes)), ", got ",
                                        c10::toString(t.scalar_type()), " ", c10::str(t.sizes())));
    }
    const bool in_place =
        rank_fits && !t.is_contiguous() && (t.strides().back() <= 1 || t.sizes().back() == 1);
    strided |= in_place;
    b.AddInput(t, in_place);
  }
  for (size_t k = 0; k < call.num_outputs(); ++k) {
    const int64_t into = k < reuse.size() ? reuse[k] : -1;
    if (into < 0) {
      b.AddOutput(sizes, call.output_dtypes[k]);
      continue;
    }
    if (into >= static_cast<int64_t>(inputs.size()) || !b.inputs[into].is_contiguous() ||
        call.input_dtypes[into] != call.output_dtypes[k]) {
      return BadCall(call, absl::StrCat("output ", k, " cannot reuse input ", into));
    }
    b.outputs.push_back(b.inputs[into]);
    b.out.push_back(const_cast<void*>(b.in[into]));
  }
  const int64_t numel = c10::multiply_integers(sizes);
  if (strided) {
    static metrics::Counter* const strided_calls = metrics::GetCounter("kernel.strided.count");
    strided_calls->Add(1);
    absl::StatusOr<StridedKernelFn> fn = FindStridedKernel(call.library, call.kernel);
    if (!fn.ok()) return fn.status();
    std::vector<int64_t> geometry = {static_cast<int64_t>(sizes.size())};
    geometry.insert(geometry.end(), sizes.begin(), sizes.end());
    for (const at::Tensor& t : b.inputs)
      geometry.insert(geometry.end(), t.strides().begin(), t.strides().end());
    RunSplit(
        [&](int64_t begin, int64_t end) {
          (*fn)(b.in.data(), b.out.data(), scalars.data(), begin, end, geometry.data());
        },
        numel, abi::kKernelBlock, 1);
  } else {
    absl::StatusOr<KernelFn> fn = FindKernel(call.library, call.kernel);
    if (!fn.ok()) return fn.status();
    RunSplit(
        [&](int64_t begin, int64_t end) { (*fn)(b.in.data(), b.out.data(), scalars.data(), begin, end); },
        numel, abi::kKernelBlock, 1);
  }
  return std::move(b.outputs);
}

absl::StatusOr<std::vector<at::Tensor>> RunRows(const KernelCall& call, const std::vector<at::Tensor>& inputs,
                                                const std::vector<double>& scalars) {
  Buffers b;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t numel = abi::ExtentNumel(call.input_extents[i], call.rows, call.row_length);
    const at::Tensor& t = inputs[i];
    if (t.scalar_type() != call.input_dtypes[i] || t.numel() != numel) {
      return BadCall(
          call, absl::StrCat("input ", i, ": expected ", c10::toString(call.input_dtypes[i]), " of ", numel,
                             " elements, got ", c10::toString(t.scalar_type()), " ", c10::str(t.sizes())));
    }
    b.AddInput(t, /*strided=*/false);
  }
  bool by_columns = false;
  for (size_t k = 0; k < call.num_outputs(); ++k) {
    by_columns |= call.output_extents[k] == abi::Extent::kColumn;
    b.AddOutput(call.output_sizes[k], call.output_dtypes[k]);
  }
  absl::StatusOr<KernelFn> fn = FindKernel(call.library, call.kernel);
  if (!fn.ok()) return fn.status();
  auto run = [&](int64_t begin, int64_t end) {
    (*fn)(b.in.data(), b.out.data(), scalars.data(), begin, end);
  };
  if (by_columns) {
    RunSplit(run, call.row_length, abi::kColumnBlock, call.rows);
  } else {
    RunSplit(run, call.rows, 1, call.row_length);
  }
  return std::move(b.outputs);
}

}  // namespace

absl::Status ValidateKernelCall(const KernelCall& call) {
  if (call.library.empty() || call.kernel.empty()) return BadCall(call, "no library or kernel name");
  if (call.input_dtypes.size() != call.inputs.size()) {
    return BadCall(
        call, absl::StrCat(call.input_dtypes.size(), " input dtypes for ", call.inputs.size(), " inputs"));
  }
  if (call.num_outputs() == 0) return BadCall(call, "no outputs");
  for (c10::ScalarType d : call.input_dtypes) {
    if (!KernelDtype(d)) return BadCall(call, absl::StrCat("bad input dtype ", static_cast<int>(d)));
  }
  for (c10::ScalarType d : call.output_dtypes) {
    if (!KernelDtype(d)) return BadCall(call, absl::StrCat("bad output dtype ", static_cast<int>(d)));
  }
  if (call.form == KernelCall::Form::kFlat) {
    if (Numel(call.sizes) < 0) return BadCall(call, "bad sizes");  // [] is one element
    if (!call.input_extents.empty() || !call.output_extents.empty() || !call.output_sizes.empty() ||
        call.rows != 0 || call.row_length != 0) {
      return BadCall(call, "a flat call with row fields");
    }
    return absl::OkStatus();
  }
  if (call.form != KernelCall::Form::kRows) return BadCall(call, "unknown form");
  if (call.rows < 0 || call.row_length <= 0 || Numel({call.rows, call.row_length}) < 0) {
    return BadCall(call, absl::StrCat("bad domain of ", call.rows, " rows of ", call.row_length));
  }
  if (!call.sizes.empty()) return BadCall(call, "a row call with flat sizes");
  if (call.input_extents.size() != call.inputs.size()) {
    return BadCall(
        call, absl::StrCat(call.input_extents.size(), " input extents for ", call.inputs.size(), " inputs"));
  }
  for (abi::Extent e : call.input_extents) {
    if (!ValidExtent(e)) return BadCall(call, absl::StrCat("bad input extent ", static_cast<int>(e)));
  }
  if (call.output_extents.size() != call.num_outputs() || call.output_sizes.size() != call.num_outputs()) {
    return BadCall(call,
                   absl::StrCat(call.output_extents.size(), " output extents and ", call.output_sizes.size(),
                                " output sizes for ", call.num_outputs(), " outputs"));
  }
  for (size_t k = 0; k < call.num_outputs(); ++k) {
    const abi::Extent e = call.output_extents[k];
    // A kernel stores per-element, per-row or per-position values, never one.
    if (!ValidExtent(e) || e == abi::Extent::kOne ||
        Numel(call.output_sizes[k]) != abi::ExtentNumel(e, call.rows, call.row_length)) {
      return BadCall(
          call, absl::StrCat("output ", k, " of ", c10::str(c10::IntArrayRef(call.output_sizes[k])),
                             " does not hold extent ", static_cast<int>(e), " of ", call.rows, " rows of ",
                             call.row_length));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<at::Tensor>> RunKernelCall(const KernelCall& call,
                                                      const std::vector<at::Tensor>& inputs,
                                                      const std::vector<double>& scalars,
                                                      const std::vector<int64_t>& reuse) {
  if (inputs.size() != call.inputs.size()) {
    return BadCall(call, absl::StrCat("takes ", call.inputs.size(), " inputs, got ", inputs.size()));
  }
  if (call.form == KernelCall::Form::kFlat) return RunFlat(call, inputs, scalars, reuse);
  if (!reuse.empty()) return BadCall(call, "a row call writes no output into an input");
  return RunRows(call, inputs, scalars);
}

}  // namespace torch_neuron::runtime

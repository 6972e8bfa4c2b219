// Kernel code generation (tier 1): a fused group of elementwise ops, with the
// row reductions they feed or follow, becomes one C++ function whose loops the
// system compiler vectorizes for the host ISA.
//
// Every generated kernel has the signature
//   extern "C" void NAME(const void* const* in, void* const* out,
//                        const double* scalars, int64_t begin, int64_t end)
// and computes [begin, end) of its work, so the runtime can split one call
// across cores.
//
// Values inside a kernel are float32. An input of another dtype converts as it
// is loaded, as ATen converts it to the float32 the op computes in (type
// promotion, or a cast to float32); an output of another dtype (a cast:
// _to_copy) converts as it is stored, and the cast's value inside the kernel is
// already the stored one (truncated for integers, rounded for bfloat16).
//
// A flat kernel's work is elements. Its contiguous fast path indexes every
// tensor input and output by the same flat index. Its strided general path,
//   extern "C" void NAME_strided(..., int64_t begin, int64_t end,
//                                const int64_t* geometry)
// with geometry = rank, sizes, then each input's strides (in elements), reads
// inputs through their strides (a transposed or expanded view) and writes the
// contiguous outputs, one innermost-dim run at a time. An output pointer may
// equal an input pointer (the runtime writes an output into a donated input's
// contiguous buffer); element i is read before it is written, so that is safe.
//
// A row kernel's work is rows of a [rows, row_length] domain (the trailing dims
// of a tensor collapsed into the row). Per row it runs one loop per reduction
// (16 partial results, so the loop vectorizes without reassociating a single
// sum), computes the row values, then one loop storing the element outputs;
// element values are recomputed in each loop that needs them rather than
// stored. Outputs never alias inputs.
//
// A column kernel is a row kernel whose group reduces over the rows: column
// sums, like a bias gradient (sum over the leading dims). Its work is columns:
// for a block of columns it runs over all rows in order, storing its element
// outputs and adding each row into the column sums: float32 partial sums of
// kColumnChunk rows, added up in float64, so rounding does not grow with the
// row count. The same columns give the same sums however the call is split.
// amax and amin over the rows keep one running value per column (NaN wins).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/kernel_abi.h"

namespace torch_neuron::compiler {

// Where a kernel value lives in a row kernel's domain of rows x row_length
// elements: one per element, one per row (a reduction's result, or a [R, 1]
// tensor broadcast along the row), one per position in the row (a [C] tensor
// broadcast over rows, like a bias), or a single element broadcast everywhere.
// Flat kernels hold element values only.
// Extent codes are part of the kernel ABI (runtime/kernel_abi.h).
using Extent = runtime::kernel_abi::Extent;

// One op of a fused kernel. Its operands are kernel-local values: the kernel's
// tensor inputs are values 0..num_inputs-1, then op i's result is value
// num_inputs + i. Scalar operands index the kernel's scalars; literal operands
// are compile-time constants (an attribute of the op).
struct FusedOp {
  struct Operand {
    bool scalar = false;
    int32_t index = 0;  // a value, or a scalar
    std::optional<double> literal;
  };
  std::string op;  // "aten::mul.Tensor"
  std::vector<Operand> operands;
  // Row kernels: kRow for a reduction over the row (and ops on row values),
  // kColumn for a reduction over the rows (a column kernel).
  Extent extent = Extent::kElement;
  // BFloat16 or Half: an op computing float32 whose ATen result has this
  // dtype; its value is rounded to it, as ATen rounds each op's result (see
  // RoundsTo).
  c10::ScalarType rounding = c10::ScalarType::Float;
};

struct FusedKernel {
  std::string name;  // a C identifier, unique within its graph ("tn_k0")
  int32_t num_inputs = 0;
  int32_t num_scalars = 0;
  std::vector<FusedOp> ops;
  std::vector<int32_t> outputs;  // values the kernel stores
  // 0: a flat kernel over elements. Otherwise a row kernel: its loop runs over
  // rows of this many elements (a compile-time constant of the source), with
  // row reductions, and its inputs have the extents below.
  int64_t row_length = 0;
  std::vector<Extent> input_extents;
  // The dtype of each input and output; empty or short: float32 (see
  // KernelLoads and CastRule for the others).
  std::vector<c10::ScalarType> input_dtypes;
  std::vector<c10::ScalarType> output_dtypes;
  // Row kernels: the number of rows (a compile-time constant of column
  // kernels' source only).
  int64_t rows = 0;

  c10::ScalarType InputDtype(int32_t v) const {
    return v < static_cast<int32_t>(input_dtypes.size()) ? input_dtypes[v] : c10::ScalarType::Float;
  }
  c10::ScalarType OutputDtype(int32_t i) const {
    return i < static_cast<int32_t>(output_dtypes.size()) ? output_dtypes[i] : c10::ScalarType::Float;
  }

  Extent ExtentOf(int32_t value) const {
    if (row_length == 0) return Extent::kElement;
    return value < num_inputs ? input_extents[value] : ops[value - num_inputs].extent;
  }
  bool IsColumnKernel() const {
    for (const FusedOp& op : ops) {
      if (op.extent == Extent::kColumn) return true;
    }
    return false;
  }
};

// Reductions a kernel computes (sum, mean, amax, amin): over trailing dims in
// a row kernel, over leading dims in a column kernel.
bool IsReduction(const std::string& op);

// Rows per float32 partial sum of a column kernel.
inline constexpr int64_t kColumnChunk = 64;

// Columns per block of a column kernel; the runtime splits column kernels
// across threads at multiples of it (the kernel ABI's quantum).
inline constexpr int64_t kColumnBlock = runtime::kernel_abi::kColumnBlock;

// The dtype of rule `op`'s result: float32, bool for comparisons, a cast's
// target ("aten::_to_copy[Long]": int64).
c10::ScalarType ResultDtype(const std::string& op);

// The rule name of a cast to `dtype`, if codegen has one.
std::optional<std::string> CastRule(c10::ScalarType dtype);

// Dtypes a kernel input may have (converted to float32 as loaded): float32,
// float64, bool, bfloat16, float16 and the integer types. Outputs are float32, bool, or
// a cast's target (CastRule).
bool KernelLoads(c10::ScalarType dtype);

// Whether an op of `rule` (which computes float32) may give a result of
// `dtype`: float32, or bfloat16 and float16, which ATen's CPU kernels compute
// in float32 and round once per op (most rules; scalars read as ATen reads
// them). A fused op of those rounds its value (FusedOp::rounding), so later
// ops read what ATen's would.
bool RoundsTo(const std::string& rule, c10::ScalarType dtype);

// Whether every value of `dtype` is a float32 exactly (bool, bfloat16,
// float16, the integers up to 16 bits), so converting it through a kernel's float32 values
// changes nothing.
bool ExactInFloat(c10::ScalarType dtype);

// Elements per block of a kernel's loop; the runtime splits calls across
// threads at multiples of it (the kernel ABI's quantum).
inline constexpr int64_t kKernelBlock = runtime::kernel_abi::kKernelBlock;

// The most dims a flat kernel's strided path indexes.
inline constexpr int64_t kMaxStridedRank = runtime::kernel_abi::kMaxStridedRank;

// The source of the object every generated library links in: the kernel ABI
// version symbol (runtime/kernel_abi.h) the runtime checks when it loads it.
std::string AbiVersionSource();

// Identifies what codegen emits (formulas, helpers, and the source generated
// for fixed probe kernels, so any change of loop structure counts): part of the
// tier-1 compiler fingerprint, so cached executables from another codegen are
// never reused.
std::string CodegenId();

// Whether codegen can express `op` with these operands (a tensor or scalar
// kind per position). Used by the fusion pass to decide membership.
bool CanGenerate(const std::string& op, const std::vector<bool>& operand_is_scalar);

// The C++ source of one kernel (includes nothing but <cmath> and <cstdint>).
// A row kernel has the same signature, with begin and end counting rows.
std::string KernelSource(const FusedKernel& kernel);

// Readable one-line-per-op form, for printed IR and golden tests.
std::string KernelSummary(const FusedKernel& kernel);

}  // namespace torch_neuron::compiler

// Kernel code generation (tier 1): a fused group of float32 elementwise ops,
// with the row reductions they feed or follow, becomes one C++ function whose
// loops the system compiler vectorizes for the host ISA.
//
// Every generated kernel has the signature
//   extern "C" void NAME(const float* const* in, float* const* out,
//                        const double* scalars, int64_t begin, int64_t end)
// and computes [begin, end) of its work, so the runtime can split one call
// across cores.
//
// A flat kernel's work is elements: device buffers are contiguous, so its loop
// indexes every tensor input and output by the same flat index. An output
// pointer may equal an input pointer (the runtime writes an output into a
// donated input's buffer); element i is read before it is written, so that is
// safe.
//
// A row kernel's work is rows of a [rows, row_length] domain (the trailing dims
// of a tensor collapsed into the row). Per row it runs one loop per reduction
// (16 partial results, so the loop vectorizes without reassociating a single
// sum), computes the row values, then one loop storing the element outputs;
// element values are recomputed in each loop that needs them rather than
// stored. Outputs never alias inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_neuron::compiler {

// Where a kernel value lives in a row kernel's domain of rows x row_length
// elements: one per element, one per row (a reduction's result, or a [R, 1]
// tensor broadcast along the row), one per position in the row (a [C] tensor
// broadcast over rows, like a bias), or a single element broadcast everywhere.
// Flat kernels hold element values only.
enum class Extent : uint8_t { kElement, kRow, kColumn, kOne };

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
  // Row kernels: kRow for a reduction over the row (and ops on row values).
  Extent extent = Extent::kElement;
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
  // Inputs and outputs holding bool (one byte per element; read as 0 or 1,
  // stored as value != 0); empty: none. All others are float32.
  std::vector<bool> bool_inputs;
  std::vector<bool> bool_outputs;

  bool IsBoolInput(int32_t v) const { return v < static_cast<int32_t>(bool_inputs.size()) && bool_inputs[v]; }
  bool IsBoolOutput(int32_t i) const { return i < static_cast<int32_t>(bool_outputs.size()) && bool_outputs[i]; }

  Extent ExtentOf(int32_t value) const {
    if (row_length == 0) return Extent::kElement;
    return value < num_inputs ? input_extents[value] : ops[value - num_inputs].extent;
  }
};

// Row reductions a row kernel computes: op -> identity, combining formula.
bool IsRowReduction(const std::string& op);

// Whether rule `op` computes a bool (a comparison).
bool YieldsBool(const std::string& op);

// Elements per block of a kernel's loop; the runtime splits calls across
// threads at multiples of it.
inline constexpr int64_t kKernelBlock = 512;

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

// Kernel code generation (tier 1): a fused group of float32 elementwise ops
// becomes one C++ function whose loop the system compiler vectorizes for the
// host ISA.
//
// Every generated kernel has the signature
//   extern "C" void NAME(const float* const* in, float* const* out,
//                        const double* scalars, int64_t begin, int64_t end)
// and computes elements [begin, end) of its outputs, so the runtime can split
// one call across cores. Device buffers are contiguous, so the loop indexes
// every tensor input and output by the same flat index. An output pointer may
// equal an input pointer (the runtime writes an output into a donated input's
// buffer); element i is read before it is written, so that is safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuron::compiler {

// One op of a fused kernel. Its operands are kernel-local values: the kernel's
// tensor inputs are values 0..num_inputs-1, then op i's result is value
// num_inputs + i. Scalar operands index the kernel's scalars.
struct FusedOp {
  struct Operand {
    bool scalar = false;
    int32_t index = 0;  // a value, or a scalar
  };
  std::string op;  // "aten::mul.Tensor"
  std::vector<Operand> operands;
};

struct FusedKernel {
  std::string name;  // a C identifier, unique within its graph ("tn_k0")
  int32_t num_inputs = 0;
  int32_t num_scalars = 0;
  std::vector<FusedOp> ops;
  std::vector<int32_t> outputs;  // values the kernel stores
};

// Elements per block of a kernel's loop; the runtime splits calls across
// threads at multiples of it.
inline constexpr int64_t kKernelBlock = 512;

// Identifies what codegen emits (formulas, helpers, loop shape): part of the
// tier-1 compiler fingerprint, so cached executables from another codegen are
// never reused. Bump kCodegenRevision when the loop structure changes.
std::string CodegenId();

// Whether codegen can express `op` with these operands (a tensor or scalar
// kind per position). Used by the fusion pass to decide membership.
bool CanGenerate(const std::string& op, const std::vector<bool>& operand_is_scalar);

// The C++ source of one kernel (includes nothing but <cmath> and <cstdint>).
std::string KernelSource(const FusedKernel& kernel);

// Readable one-line-per-op form, for printed IR and golden tests.
std::string KernelSummary(const FusedKernel& kernel);

}  // namespace torch_neuron::compiler

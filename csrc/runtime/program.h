// Program: what the compiler produces and the device executes: an ordered list
// of instructions over numbered registers. An instruction is an ATen operator
// call or (tier 1) a call of one of the program's generated kernels.
//
// Registers hold tensors or scalars. Parameters (device buffers, Python scalars,
// generators) are bound to their registers at each execution; constants are
// baked in. Each instruction names the registers whose last use it is, so their
// memory is released as soon as possible.
//
// Immutable once built; shared by the executable cache and running executions.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/kernel_abi.h"

namespace torch_neuron::runtime {

// How an instruction supplies one schema argument.
struct ProgramArg {
  enum class Kind : uint8_t {
    kRegister,       // a register as is (tensor, or scalar for a Scalar argument)
    kRegisterList,   // Tensor[] / Tensor?[] / Scalar[] / SymInt[] (-1: None)
    kWrappedScalar,  // a Tensor argument fed from a scalar register: a 0-dim tensor
    kGenerator,      // a Generator? argument: the register holds a neuron generator
    kConstant,       // a fixed value
  };
  Kind kind = Kind::kConstant;
  std::vector<int32_t> registers;
  c10::IValue constant;
  // kWrappedScalar: the tensor's dtype and whether it is a Python number (which
  // takes no part in type promotion). kRegisterList: Undefined for tensors,
  // Double for Scalar[], Long for int[] (sizes of a size-generic graph).
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool wrapped_number = true;
  // The op writes this argument (in-place or out=): it gets a private copy, since
  // registers may alias device buffers or values other instructions still read.
  bool copy_before_use = false;
};

// A call of a generated kernel (kernel_abi.h has the kernels' C signatures).
// Inputs are tensors of input_dtypes; outputs are new tensors of output_dtypes
// in device memory, except that the executor may write an output into a donated
// input's buffer. Flat: every input and output has `sizes`; an input that is
// not contiguous is read through its strides where the kernel's strided path
// allows. Rows: the domain is `rows` rows of `row_length`; input i holds
// input_extents[i] of it (contiguous), output k holds output_extents[k] and has
// output_sizes[k]; a kernel with a kColumn output runs by columns.
struct KernelCall {
  enum class Form : uint8_t { kFlat, kRows };
  Form form = Form::kFlat;
  std::string library;           // the program's native object holding the kernel
  std::string kernel;            // its symbol
  std::vector<int32_t> inputs;   // tensor registers
  std::vector<int32_t> scalars;  // scalar registers, passed as doubles
  std::vector<c10::ScalarType> input_dtypes;
  std::vector<c10::ScalarType> output_dtypes;  // one per output
  std::vector<int64_t> sizes;                  // kFlat
  int64_t rows = 0;                            // kRows
  int64_t row_length = 0;
  std::vector<kernel_abi::Extent> input_extents;
  std::vector<kernel_abi::Extent> output_extents;
  std::vector<std::vector<int64_t>> output_sizes;

  size_t num_outputs() const { return output_dtypes.size(); }
};

struct Instruction {
  // An ATen call: `op` with `args`, its returns spread by return_widths. A
  // kernel call: `kernel`; op, args and return_widths are unused.
  std::optional<c10::OperatorHandle> op;
  std::optional<KernelCall> kernel;
  std::string op_name;  // "aten::mul.Tensor" or "neuron::fused_kernel", for errors
  std::string source;   // user's file:line when recorded
  std::vector<ProgramArg> args;
  std::vector<int32_t> outputs;  // register per returned value (-1: unused)
  // Per schema return: -1 for one value, n for a Tensor[] of n whose elements
  // take the next n outputs (ir/op_schema.h ReturnWidths).
  std::vector<int32_t> return_widths;
  std::vector<int32_t> release;  // registers whose last use this is
};

struct Program {
  int32_t num_registers = 0;
  // Parameter i of the graph is bound to register parameter_registers[i].
  std::vector<int32_t> parameter_registers;
  // Registers set once per execution from these values (0/1 scalars, folded tensors).
  std::vector<std::pair<int32_t, c10::IValue>> constants;
  std::vector<Instruction> instructions;
  // Registers holding the graph's outputs, with each output's dtype and sizes.
  std::vector<int32_t> outputs;
  std::vector<c10::ScalarType> output_dtypes;
  std::vector<std::vector<int64_t>> output_sizes;
  // Per output, the parameters whose buffers it may take when the caller gives
  // them up (the NEFF signature's donations: device-data inputs of the output's
  // byte size). Empty lists for a program that donates nothing.
  std::vector<std::vector<int32_t>> donation_candidates;
  int64_t num_nodes = 0;
  // Compiled from a size-generic graph (ir/graph.h): it runs on inputs of any
  // sizes its graph's traces had, its outputs taking the sizes its ATen calls
  // give them; output_sizes are those of the trace it was compiled from, and
  // the caller, which traced the sizes of this run, checks its outputs.
  bool size_generic = false;
  // Tier 1: the shared objects holding the generated kernels its kernel calls
  // name, as (name, bytes); registered with the native library registry when
  // the runtime loads the program (LoadNativeObjects).
  std::vector<std::pair<std::string, std::string>> native_objects;
};

}  // namespace torch_neuron::runtime

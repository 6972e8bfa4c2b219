// Program: what the compiler produces and the device executes (tier 0): an
// ordered list of ATen operator calls over numbered registers.
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
#include <string>
#include <utility>
#include <vector>

namespace torch_neuron::runtime {

// How an instruction supplies one schema argument.
struct ProgramArg {
  enum class Kind : uint8_t {
    kRegister,       // a register as is (tensor, or scalar for a Scalar argument)
    kRegisterList,   // Tensor[] / Tensor?[] / Scalar[] (-1: None)
    kWrappedScalar,  // a Tensor argument fed from a scalar register: a 0-dim tensor
    kGenerator,      // a Generator? argument: the register holds a neuron generator
    kConstant,       // a fixed value
  };
  Kind kind = Kind::kConstant;
  std::vector<int32_t> registers;
  c10::IValue constant;
  // kWrappedScalar: the tensor's dtype and whether it is a Python number (which
  // takes no part in type promotion).
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool wrapped_number = true;
  // The op writes this argument (in-place or out=): it gets a private copy, since
  // registers may alias device buffers or values other instructions still read.
  bool copy_before_use = false;
};

struct Instruction {
  c10::OperatorHandle op;
  std::string op_name;  // "aten::mul.Tensor", for errors
  std::string source;   // user's file:line when recorded
  std::vector<ProgramArg> args;
  std::vector<int32_t> outputs;  // register per returned value (-1: unused)
  // Per schema return: -1 for one value, n for a Tensor[] of n whose elements
  // take the next n outputs (runtime/schema_types.h ReturnWidths).
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
  // Tier 1: the shared objects holding the generated kernels its
  // neuron::fused_kernel calls name, as (name, bytes); registered with the
  // native library registry when the program is built or read.
  std::vector<std::pair<std::string, std::string>> native_objects;
};

}  // namespace torch_neuron::runtime

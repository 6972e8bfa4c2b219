#include "compiler/lowering.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "compiler/memory_schedule.h"
#include "ir/op_traits.h"
#include "runtime/kernel_call.h"
#include "runtime/op_lookup.h"
#include "runtime/schema_types.h"

namespace torch_neuron::compiler {
namespace {

using runtime::IsGeneratorType;
using runtime::IsTensorType;

bool IsScalarListType(const c10::TypePtr& type) { return runtime::IsListOf(type, c10::TypeKind::NumberType); }

// The typed call of node `n`'s fused kernel, its registers left to the caller.
absl::StatusOr<runtime::KernelCall> KernelCallOf(const CompileNode& n, const std::string& library) {
  const FusedKernel& k = *n.kernel;
  runtime::KernelCall call;
  call.library = library;
  call.kernel = k.name;
  for (int32_t i = 0; i < k.num_inputs; ++i) call.input_dtypes.push_back(k.InputDtype(i));
  for (size_t i = 0; i < k.outputs.size(); ++i)
    call.output_dtypes.push_back(k.OutputDtype(static_cast<int32_t>(i)));
  if (static_cast<size_t>(n.num_outputs()) != k.outputs.size() ||
      n.operands.size() != static_cast<size_t>(k.num_inputs + k.num_scalars)) {
    return absl::InternalError(absl::StrCat("kernel ", k.name, " has ", n.operands.size(), " operands and ",
                                            n.num_outputs(), " outputs; it takes ", k.num_inputs, " + ",
                                            k.num_scalars, " and stores ", k.outputs.size()));
  }
  if (k.row_length == 0) {
    call.form = runtime::KernelCall::Form::kFlat;
    call.sizes = n.shape(0).sizes();
  } else {
    call.form = runtime::KernelCall::Form::kRows;
    call.rows = k.rows;
    call.row_length = k.row_length;
    call.input_extents = k.input_extents;
    for (int32_t v : k.outputs) call.output_extents.push_back(k.ExtentOf(v));
    for (int32_t i = 0; i < n.num_outputs(); ++i) call.output_sizes.push_back(n.shape(i).sizes());
  }
  return call;
}

// Per node: whether it is a copying view op run as its view (OpTraits::view_form), which
// it is when every reader takes a view: a stride-agnostic op, another view op
// run as a view, or the graph's output (the executor gives outputs that alias
// anything memory of their own).
std::vector<bool> RunAsViews(const CompileGraph& g) {
  const size_t size = g.nodes.size();
  std::vector<std::vector<int32_t>> readers(size);
  for (size_t i = 0; i < size; ++i) {
    if (g.nodes[i].dead) continue;
    for (const ValueRef& v : g.nodes[i].operands) readers[v.node].push_back(static_cast<int32_t>(i));
  }
  std::vector<bool> as_view(size, false);
  for (size_t i = size; i-- > 0;) {  // readers come later: decided first
    const CompileNode& n = g.nodes[i];
    if (n.dead || n.folded || n.kind != ir::NodeKind::kOp || ir::TraitsOf(n.op).view_form.empty()) {
      continue;
    }
    as_view[i] = std::all_of(readers[i].begin(), readers[i].end(), [&](int32_t r) {
      return as_view[r] || ir::TraitsOf(g.nodes[r].op).stride_agnostic;
    });
  }
  return as_view;
}

}  // namespace

absl::StatusOr<runtime::Program> LowerToProgram(const CompileGraph& g, bool views_in_place,
                                                const std::string& library) {
  const std::vector<bool> as_view = views_in_place ? RunAsViews(g) : std::vector<bool>(g.nodes.size(), false);
  runtime::Program program;
  // Register of each (node, output).
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> reg;
  auto new_reg = [&](int32_t node, int32_t index) {
    const int32_t r = program.num_registers++;
    reg[{node, index}] = r;
    return r;
  };

  for (int32_t p : g.parameters) program.parameter_registers.push_back(new_reg(p, 0));

  std::vector<int32_t> last_use;  // per register: instruction index of its last read
  auto record_read = [&](int32_t r) {
    if (r < 0) return;
    if (static_cast<size_t>(r) >= last_use.size()) last_use.resize(r + 1, -1);
    last_use[r] = static_cast<int32_t>(program.instructions.size());
  };
  auto reg_of = [&](const ValueRef& v) { return reg.at({v.node, g.nodes[v.node].folded ? 0 : v.index}); };
  std::vector<int32_t> made_by;  // per register: the instruction that makes it, or -1
  auto new_output = [&](int32_t node, int32_t index) {
    const int32_t r = new_reg(node, index);
    made_by.resize(r + 1, -1);
    made_by[r] = static_cast<int32_t>(program.instructions.size());
    return r;
  };
  for (const int32_t node : MemorySchedule(g, as_view)) {
    const size_t i = static_cast<size_t>(node);
    const CompileNode& n = g.nodes[i];
    if (n.dead || n.is_parameter()) continue;
    if (n.folded) {
      program.constants.emplace_back(new_reg(node, 0), *n.folded);
      continue;
    }
    if (n.kind == ir::NodeKind::kConstant) {
      program.constants.emplace_back(new_reg(node, 0), n.scalar);
      continue;
    }
    if (n.kernel) {
      if (library.empty())
        return absl::InternalError(absl::StrCat("kernel ", n.kernel->name, " was not built"));
      absl::StatusOr<runtime::KernelCall> call = KernelCallOf(n, library);
      if (!call.ok()) return call.status();
      for (size_t k = 0; k < n.operands.size(); ++k) {
        const int32_t r = reg_of(n.operands[k]);
        (static_cast<int32_t>(k) < n.kernel->num_inputs ? call->inputs : call->scalars).push_back(r);
        record_read(r);
      }
      if (absl::Status s = runtime::ValidateKernelCall(*call); !s.ok()) return s;
      runtime::Instruction inst{std::nullopt, *std::move(call), n.op, n.source, {}, {}, {}, {}};
      for (int32_t k = 0; k < n.num_outputs(); ++k) inst.outputs.push_back(new_output(node, k));
      program.instructions.push_back(std::move(inst));
      continue;
    }
    // A view run as a view is named as such in the program (and its NEFF).
    const std::string op_name = as_view[i] ? std::string(ir::TraitsOf(n.op).view_form) : n.op;
    absl::StatusOr<c10::OperatorHandle> op = runtime::FindOperator(op_name);
    if (!op.ok()) return op.status();
    const c10::FunctionSchema& schema = op->schema();
    if (schema.arguments().size() != n.args.size()) {
      return absl::InternalError(absl::StrCat(n.op, " was traced with ", n.args.size(),
                                              " arguments, its schema has ", schema.arguments().size()));
    }
    // Per argument, the length of a tensor list (an empty one is an attribute).
    std::vector<int64_t> list_lengths;
    for (size_t a = 0; a < n.args.size(); ++a) {
      const ir::Arg& arg = n.args[a];
      if (arg.kind == ir::Arg::Kind::kOperandList) {
        list_lengths.push_back(static_cast<int64_t>(arg.operands.size()));
      } else {
        const bool tensor_list = runtime::IsListOf(schema.arguments()[a].type(), c10::TypeKind::TensorType);
        list_lengths.push_back(arg.kind == ir::Arg::Kind::kAttr && tensor_list ? 0 : -1);
      }
    }
    absl::StatusOr<std::vector<int32_t>> widths =
        runtime::ReturnWidths(schema, n.num_outputs(), list_lengths);
    if (!widths.ok()) return widths.status();
    runtime::Instruction inst{*op, std::nullopt, op_name, n.source, {}, {}, *std::move(widths), {}};
    for (size_t a = 0; a < n.args.size(); ++a) {
      const ir::Arg& arg = n.args[a];
      const c10::TypePtr& type = schema.arguments()[a].type();
      runtime::ProgramArg pa;
      if (arg.kind == ir::Arg::Kind::kAttr) {
        pa.kind = runtime::ProgramArg::Kind::kConstant;
        pa.constant = runtime::HostAttr(arg.attr);
      } else if (arg.kind == ir::Arg::Kind::kOperand) {
        ValueRef v = n.operands[arg.operands[0]];
        const CompileNode& src = g.nodes[v.node];
        pa.registers = {reg_of(v)};
        const bool scalar_leaf = src.is_scalar_leaf();
        if (IsGeneratorType(type)) {
          pa.kind = runtime::ProgramArg::Kind::kGenerator;
        } else if (IsTensorType(type) && scalar_leaf) {
          pa.kind = runtime::ProgramArg::Kind::kWrappedScalar;
          pa.dtype = src.shape().dtype();
          pa.wrapped_number = src.op == "wrapped";
        } else {
          pa.kind = runtime::ProgramArg::Kind::kRegister;
        }
      } else {
        pa.kind = runtime::ProgramArg::Kind::kRegisterList;
        for (int32_t k : arg.operands) {
          if (k < 0) {
            pa.registers.push_back(-1);
          } else {
            pa.registers.push_back(reg_of(n.operands[k]));
          }
        }
        if (IsScalarListType(type)) pa.dtype = c10::ScalarType::Double;
        // SymInt[] of positions (a size-generic graph's sizes): a list of ints.
        if (runtime::IsListOf(type, c10::TypeKind::IntType)) pa.dtype = c10::ScalarType::Long;
      }
      const c10::AliasInfo* alias = schema.arguments()[a].alias_info();
      pa.copy_before_use = alias != nullptr && alias->isWrite();
      for (int32_t r : pa.registers) record_read(r);
      inst.args.push_back(std::move(pa));
    }
    for (int32_t k = 0; k < n.num_outputs(); ++k) inst.outputs.push_back(new_output(node, k));
    program.instructions.push_back(std::move(inst));
  }

  for (ValueRef v : g.outputs) {
    const CompileNode& n = g.nodes[v.node];
    const int32_t index = n.folded ? 0 : v.index;
    program.outputs.push_back(reg.at({v.node, index}));
    program.output_dtypes.push_back(n.shape(v.index).dtype());
    program.output_sizes.push_back(n.shape(v.index).sizes());
  }

  // Release each register after its last read, unless the program returns it;
  // an output nobody reads, after the instruction that makes it.
  last_use.resize(program.num_registers, -1);
  made_by.resize(program.num_registers, -1);
  std::vector<bool> is_output(program.num_registers, false);
  for (int32_t r : program.outputs) is_output[r] = true;
  for (int32_t r = 0; r < program.num_registers; ++r) {
    if (is_output[r]) continue;
    const int32_t at = last_use[r] >= 0 ? last_use[r] : made_by[r];
    if (at >= 0) program.instructions[at].release.push_back(r);
  }
  program.num_nodes = g.LiveNodeCount();
  return program;
}

}  // namespace torch_neuron::compiler

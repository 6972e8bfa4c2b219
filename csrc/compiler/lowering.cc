#include "compiler/lowering.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "c10/core/ScalarType.h"
#include "compiler/memory_schedule.h"
#include "ir/op_traits.h"
#include "neff/constant_codec.h"
#include "ir/op_lookup.h"
#include "ir/op_schema.h"

namespace torch_neuron::compiler {
namespace {

using ir::IsGeneratorType;
using ir::IsTensorType;

bool IsScalarListType(const c10::TypePtr& type) { return ir::IsListOf(type, c10::TypeKind::NumberType); }

// Writes the typed call of node `n`'s fused kernel into `call`, its registers
// left to the caller. The NEFF reader checks the call's fields against the
// kernel ABI (runtime::ValidateKernelCall) when it loads the program.
absl::Status WriteKernelCall(const CompileNode& n, const std::string& library, proto::KernelCall* call) {
  const FusedKernel& k = *n.kernel;
  call->set_library(library);
  call->set_kernel(k.name);
  for (int32_t i = 0; i < k.num_inputs; ++i) call->add_input_dtypes(static_cast<int32_t>(k.InputDtype(i)));
  for (size_t i = 0; i < k.outputs.size(); ++i)
    call->add_output_dtypes(static_cast<int32_t>(k.OutputDtype(static_cast<int32_t>(i))));
  if (static_cast<size_t>(n.num_outputs()) != k.outputs.size() ||
      n.operands.size() != static_cast<size_t>(k.num_inputs + k.num_scalars)) {
    return absl::InternalError(absl::StrCat("kernel ", k.name, " has ", n.operands.size(), " operands and ",
                                            n.num_outputs(), " outputs; it takes ", k.num_inputs, " + ",
                                            k.num_scalars, " and stores ", k.outputs.size()));
  }
  if (k.row_length == 0) {
    call->set_form(proto::KernelCall::FLAT);
    for (int64_t s : n.shape(0).sizes()) call->add_sizes(s);
  } else {
    call->set_form(proto::KernelCall::ROWS);
    call->set_rows(k.rows);
    call->set_row_length(k.row_length);
    for (Extent e : k.input_extents) call->add_input_extents(static_cast<int32_t>(e));
    for (int32_t v : k.outputs) call->add_output_extents(static_cast<int32_t>(k.ExtentOf(v)));
    for (int32_t i = 0; i < n.num_outputs(); ++i) {
      proto::IntList* sizes = call->add_output_sizes();
      for (int64_t s : n.shape(i).sizes()) sizes->add_values(s);
    }
  }
  return absl::OkStatus();
}

int64_t ByteSize(const ir::Shape& shape) {
  return shape.numel() * static_cast<int64_t>(c10::elementSize(shape.dtype()));
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

proto::Signature SignatureOf(const CompileGraph& g) {
  proto::Signature s;
  std::vector<int64_t> input_bytes;
  for (int32_t p : g.parameters) {
    const CompileNode& n = g.nodes[p];
    s.add_input_kinds(n.kind == ir::NodeKind::kDeviceData  ? proto::Signature::DEVICE_DATA
                      : n.kind == ir::NodeKind::kGenerator ? proto::Signature::GENERATOR
                                                           : proto::Signature::SCALAR);
    proto::TensorSpec* spec = s.add_inputs();
    spec->set_dtype(static_cast<int32_t>(n.shape().dtype()));
    for (int64_t d : n.shape().sizes()) spec->add_sizes(d);
    input_bytes.push_back(n.kind == ir::NodeKind::kDeviceData ? ByteSize(n.shape()) : -1);
  }
  for (const ValueRef& v : g.outputs) {
    const ir::Shape& shape = g.nodes[v.node].shape(v.index);
    proto::TensorSpec* spec = s.add_outputs();
    spec->set_dtype(static_cast<int32_t>(shape.dtype()));
    for (int64_t d : shape.sizes()) spec->add_sizes(d);
    proto::DonationCandidates* donation = s.add_donations();
    const int64_t bytes = ByteSize(shape);
    for (size_t i = 0; i < input_bytes.size(); ++i) {
      if (input_bytes[i] == bytes && bytes > 0) donation->add_inputs(static_cast<int32_t>(i));
    }
  }
  return s;
}

absl::Status LowerToProgram(const CompileGraph& g, bool views_in_place, const std::string& library,
                            proto::NeffPayload* payload) {
  const std::vector<bool> as_view = views_in_place ? RunAsViews(g) : std::vector<bool>(g.nodes.size(), false);
  proto::Program& program = *payload->mutable_program();
  program.Clear();
  payload->clear_source_map();
  int32_t num_registers = 0;
  // Register of each (node, output).
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> reg;
  auto new_reg = [&](int32_t node, int32_t index) {
    const int32_t r = num_registers++;
    reg[{node, index}] = r;
    return r;
  };

  for (int32_t p : g.parameters) program.add_parameter_registers(new_reg(p, 0));

  // Instructions are written in place (the payload may live on an arena:
  // compiler.cc), so the one being lowered is the last one added.
  std::vector<int32_t> last_use;  // per register: instruction index of its last read
  auto record_read = [&](int32_t r) {
    if (r < 0) return;
    if (static_cast<size_t>(r) >= last_use.size()) last_use.resize(r + 1, -1);
    last_use[r] = program.instructions_size() - 1;
  };
  auto reg_of = [&](const ValueRef& v) { return reg.at({v.node, g.nodes[v.node].folded ? 0 : v.index}); };
  std::vector<int32_t> made_by;  // per register: the instruction that makes it, or -1
  auto new_output = [&](int32_t node, int32_t index) {
    const int32_t r = new_reg(node, index);
    made_by.resize(r + 1, -1);
    made_by[r] = program.instructions_size() - 1;
    return r;
  };
  auto add_constant = [&](int32_t node, const c10::IValue& value) -> absl::Status {
    proto::RegisterConstant* c = program.add_constants();
    c->set_register_(new_reg(node, 0));
    return neff::EncodeConstant(value, c->mutable_value());
  };
  // The instruction being lowered came from the user's line `source`.
  auto note_source = [&](const std::string& source) {
    if (source.empty()) return;
    proto::SourceEntry* entry = payload->add_source_map();
    entry->set_instruction(program.instructions_size() - 1);
    entry->set_location(source);
  };
  for (const int32_t node : MemorySchedule(g, as_view)) {
    const size_t i = static_cast<size_t>(node);
    const CompileNode& n = g.nodes[i];
    if (n.dead || n.is_parameter()) continue;
    if (n.folded || n.kind == ir::NodeKind::kConstant) {
      const c10::IValue value = n.folded ? c10::IValue(*n.folded) : c10::IValue(n.scalar);
      if (absl::Status s = add_constant(node, value); !s.ok()) return s;
      continue;
    }
    if (n.kernel) {
      if (library.empty())
        return absl::InternalError(absl::StrCat("kernel ", n.kernel->name, " was not built"));
      proto::Instruction& inst = *program.add_instructions();
      inst.set_op(n.op);
      proto::KernelCall* call = inst.mutable_kernel();
      if (absl::Status s = WriteKernelCall(n, library, call); !s.ok()) return s;
      for (size_t k = 0; k < n.operands.size(); ++k) {
        const int32_t r = reg_of(n.operands[k]);
        if (static_cast<int32_t>(k) < n.kernel->num_inputs) {
          call->add_inputs(r);
        } else {
          call->add_scalars(r);
        }
        record_read(r);
      }
      for (int32_t k = 0; k < n.num_outputs(); ++k) inst.add_outputs(new_output(node, k));
      note_source(n.source);
      continue;
    }
    // A view run as a view is named as such in the program (and its NEFF), and
    // so is a view run as reshape (OpTraits::runs_as_reshape).
    const ir::OpTraits& traits = ir::TraitsOf(n.op);
    const std::string op_name = as_view[i]               ? std::string(traits.view_form)
                                : traits.runs_as_reshape ? std::string("aten::reshape")
                                                         : n.op;
    absl::StatusOr<c10::OperatorHandle> op = ir::FindOperator(op_name);
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
        const bool tensor_list = ir::IsListOf(schema.arguments()[a].type(), c10::TypeKind::TensorType);
        list_lengths.push_back(arg.kind == ir::Arg::Kind::kAttr && tensor_list ? 0 : -1);
      }
    }
    absl::StatusOr<std::vector<int32_t>> widths = ir::ReturnWidths(schema, n.num_outputs(), list_lengths);
    if (!widths.ok()) return widths.status();
    proto::Instruction& inst = *program.add_instructions();
    inst.set_op(op_name);
    for (int32_t w : *widths) inst.add_return_widths(w);
    for (size_t a = 0; a < n.args.size(); ++a) {
      const ir::Arg& arg = n.args[a];
      const c10::TypePtr& type = schema.arguments()[a].type();
      proto::ProgramArg& pa = *inst.add_args();
      // What the reader makes of an argument with no dtype of its own.
      pa.set_dtype(static_cast<int32_t>(c10::ScalarType::Undefined));
      pa.set_wrapped_number(true);
      if (arg.kind == ir::Arg::Kind::kAttr) {
        pa.set_kind(proto::ProgramArg::CONSTANT);
        absl::Status s = neff::EncodeConstant(ir::HostAttr(arg.attr), pa.mutable_constant());
        if (!s.ok()) return absl::Status(s.code(), absl::StrCat(n.op, ": ", s.message()));
      } else if (arg.kind == ir::Arg::Kind::kOperand) {
        ValueRef v = n.operands[arg.operands[0]];
        const CompileNode& src = g.nodes[v.node];
        pa.add_registers(reg_of(v));
        if (IsGeneratorType(type)) {
          pa.set_kind(proto::ProgramArg::GENERATOR);
        } else if (IsTensorType(type) && src.is_scalar_leaf()) {
          pa.set_kind(proto::ProgramArg::WRAPPED_SCALAR);
          pa.set_dtype(static_cast<int32_t>(src.shape().dtype()));
          pa.set_wrapped_number(src.op == "wrapped");
        } else {
          pa.set_kind(proto::ProgramArg::REGISTER);
        }
      } else {
        pa.set_kind(proto::ProgramArg::REGISTER_LIST);
        for (int32_t k : arg.operands) pa.add_registers(k < 0 ? -1 : reg_of(n.operands[k]));
        if (IsScalarListType(type)) pa.set_dtype(static_cast<int32_t>(c10::ScalarType::Double));
        // SymInt[] of positions (a size-generic graph's sizes): a list of ints.
        if (ir::IsListOf(type, c10::TypeKind::IntType))
          pa.set_dtype(static_cast<int32_t>(c10::ScalarType::Long));
      }
      const c10::AliasInfo* alias = schema.arguments()[a].alias_info();
      pa.set_copy_before_use(alias != nullptr && alias->isWrite());
      for (int32_t r : pa.registers()) record_read(r);
    }
    for (int32_t k = 0; k < n.num_outputs(); ++k) inst.add_outputs(new_output(node, k));
    note_source(n.source);
  }

  std::vector<bool> is_output(num_registers, false);
  for (ValueRef v : g.outputs) {
    const CompileNode& n = g.nodes[v.node];
    const int32_t r = reg.at({v.node, n.folded ? 0 : v.index});
    program.add_outputs(r);
    is_output[r] = true;
  }

  // Release each register after its last read, unless the program returns it;
  // an output nobody reads, after the instruction that makes it.
  last_use.resize(num_registers, -1);
  made_by.resize(num_registers, -1);
  for (int32_t r = 0; r < num_registers; ++r) {
    if (is_output[r]) continue;
    const int32_t at = last_use[r] >= 0 ? last_use[r] : made_by[r];
    if (at >= 0) program.mutable_instructions(at)->add_release(r);
  }
  program.set_num_registers(num_registers);
  program.set_num_nodes(g.LiveNodeCount());
  *payload->mutable_signature() = SignatureOf(g);
  return absl::OkStatus();
}

}  // namespace torch_neuron::compiler

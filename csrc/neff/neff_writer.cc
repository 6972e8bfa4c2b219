#include "neff/neff_writer.h"

#include <xxhash.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "neff/constant_codec.h"
#include "neff/neff_format.h"

namespace torch_neuron::neff {
namespace {

void PutLittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

proto::ProgramArg::Kind ArgKind(runtime::ProgramArg::Kind kind) {
  switch (kind) {
    case runtime::ProgramArg::Kind::kRegister:
      return proto::ProgramArg::REGISTER;
    case runtime::ProgramArg::Kind::kRegisterList:
      return proto::ProgramArg::REGISTER_LIST;
    case runtime::ProgramArg::Kind::kWrappedScalar:
      return proto::ProgramArg::WRAPPED_SCALAR;
    case runtime::ProgramArg::Kind::kGenerator:
      return proto::ProgramArg::GENERATOR;
    case runtime::ProgramArg::Kind::kConstant:
      return proto::ProgramArg::CONSTANT;
  }
  return proto::ProgramArg::CONSTANT;
}

void WriteKernelCall(const runtime::KernelCall& call, proto::KernelCall* out) {
  out->set_form(call.form == runtime::KernelCall::Form::kFlat ? proto::KernelCall::FLAT
                                                              : proto::KernelCall::ROWS);
  out->set_library(call.library);
  out->set_kernel(call.kernel);
  for (int32_t r : call.inputs) out->add_inputs(r);
  for (int32_t r : call.scalars) out->add_scalars(r);
  for (c10::ScalarType d : call.input_dtypes) out->add_input_dtypes(static_cast<int32_t>(d));
  for (c10::ScalarType d : call.output_dtypes) out->add_output_dtypes(static_cast<int32_t>(d));
  for (int64_t s : call.sizes) out->add_sizes(s);
  out->set_rows(call.rows);
  out->set_row_length(call.row_length);
  for (runtime::kernel_abi::Extent e : call.input_extents) out->add_input_extents(static_cast<int32_t>(e));
  for (runtime::kernel_abi::Extent e : call.output_extents) out->add_output_extents(static_cast<int32_t>(e));
  for (const std::vector<int64_t>& sizes : call.output_sizes) {
    proto::IntList* list = out->add_output_sizes();
    for (int64_t s : sizes) list->add_values(s);
  }
}

}  // namespace

absl::StatusOr<std::string> WriteNeff(const NeffContents& contents) {
  const runtime::Program& program = *contents.program;
  proto::NeffPayload payload;
  payload.set_format_version(kFormatVersion);
  *payload.mutable_fingerprint() = contents.fingerprint;
  const uint64_t hash_words[2] = {absl::Uint128High64(contents.graph_hash),
                                  absl::Uint128Low64(contents.graph_hash)};
  payload.set_graph_hash(reinterpret_cast<const char*>(hash_words), sizeof(hash_words));
  *payload.mutable_signature() = contents.signature;

  for (const auto& [name, code] : program.native_objects) {
    proto::NativeObject* object = payload.add_native_objects();
    object->set_name(name);
    object->set_code(code);
  }
  proto::Program* p = payload.mutable_program();
  p->set_num_registers(program.num_registers);
  p->set_num_nodes(program.num_nodes);
  p->set_size_generic(program.size_generic);
  for (int32_t r : program.parameter_registers) p->add_parameter_registers(r);
  for (const auto& [reg, value] : program.constants) {
    proto::RegisterConstant* c = p->add_constants();
    c->set_register_(reg);
    absl::Status s = EncodeConstant(value, c->mutable_value());
    if (!s.ok()) return s;
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const runtime::Instruction& inst = program.instructions[i];
    proto::Instruction* pi = p->add_instructions();
    pi->set_op(inst.op_name);
    if (inst.kernel) WriteKernelCall(*inst.kernel, pi->mutable_kernel());
    for (int32_t w : inst.return_widths) pi->add_return_widths(w);
    for (int32_t r : inst.outputs) pi->add_outputs(r);
    for (int32_t r : inst.release) pi->add_release(r);
    for (const runtime::ProgramArg& arg : inst.args) {
      proto::ProgramArg* pa = pi->add_args();
      pa->set_kind(ArgKind(arg.kind));
      for (int32_t r : arg.registers) pa->add_registers(r);
      pa->set_dtype(static_cast<int32_t>(arg.dtype));
      pa->set_wrapped_number(arg.wrapped_number);
      pa->set_copy_before_use(arg.copy_before_use);
      if (arg.kind == runtime::ProgramArg::Kind::kConstant) {
        absl::Status s = EncodeConstant(arg.constant, pa->mutable_constant());
        if (!s.ok()) return s;
      }
    }
    if (!inst.source.empty()) {
      proto::SourceEntry* entry = payload.add_source_map();
      entry->set_instruction(static_cast<int32_t>(i));
      entry->set_location(inst.source);
    }
  }
  for (int32_t r : program.outputs) p->add_outputs(r);

  std::string body;
  if (!payload.SerializeToString(&body)) return absl::InternalError("NEFF payload did not serialize");
  std::string out(kMagic, sizeof(kMagic));
  PutLittleEndian(&out, kFormatVersion, 4);
  PutLittleEndian(&out, 0, 4);
  PutLittleEndian(&out, body.size(), 8);
  PutLittleEndian(&out, XXH3_64bits(body.data(), body.size()), 8);
  out += body;
  return out;
}

}  // namespace torch_neuron::neff

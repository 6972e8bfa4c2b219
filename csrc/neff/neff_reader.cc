#include "neff/neff_reader.h"

#include <xxhash.h>

#include <c10/core/ScalarType.h>

#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/hash.h"
#include "neff/constant_codec.h"
#include "neff/neff_format.h"
#include "runtime/kernel_call.h"
#include "ir/op_lookup.h"
#include "ir/op_schema.h"

namespace torch_neuron::neff {
namespace {

absl::Status Malformed(const std::string& what) {
  return absl::DataLossError(absl::StrCat("malformed NEFF: ", what));
}

uint64_t GetLittleEndian(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

class ProgramBuilder {
 public:
  // `libraries`: the names of the payload's native objects, which kernel calls
  // may name.
  ProgramBuilder(const proto::Program& p, absl::flat_hash_set<std::string> libraries)
      : p_(p), libraries_(std::move(libraries)) {}

  absl::StatusOr<runtime::Program> Build(const proto::Signature& signature) {
    runtime::Program out;
    if (p_.num_registers() < 0 || p_.num_registers() > kMaxRegisters) {
      return Malformed(absl::StrCat("register count ", p_.num_registers()));
    }
    out.num_registers = p_.num_registers();
    out.num_nodes = p_.num_nodes();
    out.size_generic = p_.size_generic();
    absl::flat_hash_set<int32_t> bound;
    for (int32_t r : p_.parameter_registers()) {
      if (!InRange(r) || !bound.insert(r).second) return Malformed(absl::StrCat("parameter register ", r));
      out.parameter_registers.push_back(r);
    }
    if (signature.input_kinds_size() != p_.parameter_registers_size() ||
        signature.inputs_size() != p_.parameter_registers_size()) {
      return Malformed("signature and program disagree on the number of inputs");
    }
    for (const proto::RegisterConstant& c : p_.constants()) {
      if (!InRange(c.register_()) || !bound.insert(c.register_()).second) {
        return Malformed(absl::StrCat("constant register ", c.register_()));
      }
      absl::StatusOr<c10::IValue> v = DecodeConstant(c.value());
      if (!v.ok()) return v.status();
      out.constants.emplace_back(c.register_(), *std::move(v));
    }
    for (int i = 0; i < p_.instructions_size(); ++i) {
      absl::StatusOr<runtime::Instruction> inst = BuildInstruction(p_.instructions(i), i);
      if (!inst.ok()) return inst.status();
      out.instructions.push_back(*std::move(inst));
    }
    if (signature.outputs_size() != p_.outputs_size()) {
      return Malformed("signature and program disagree on the number of outputs");
    }
    for (int i = 0; i < p_.outputs_size(); ++i) {
      if (!InRange(p_.outputs(i))) return Malformed(absl::StrCat("output register ", p_.outputs(i)));
      const proto::TensorSpec& spec = signature.outputs(i);
      if (!ValidDtype(spec.dtype())) return Malformed(absl::StrCat("output dtype ", spec.dtype()));
      std::vector<int64_t> sizes(spec.sizes().begin(), spec.sizes().end());
      for (int64_t s : sizes) {
        if (s < 0) return Malformed("negative output size");
      }
      out.outputs.push_back(p_.outputs(i));
      out.output_dtypes.push_back(static_cast<c10::ScalarType>(spec.dtype()));
      out.output_sizes.push_back(std::move(sizes));
    }
    if (absl::Status s = ReadDonations(signature, out); !s.ok()) return s;
    return out;
  }

 private:
  bool InRange(int32_t r) const { return r >= 0 && r < p_.num_registers(); }

  // The signature's donation candidates, checked: an output may take only a
  // device-data input's buffer of exactly its byte size, so a damaged file can
  // never make the runtime write an output past the end of a buffer.
  static absl::Status ReadDonations(const proto::Signature& signature, runtime::Program& out) {
    out.donation_candidates.assign(out.outputs.size(), {});
    if (signature.donations_size() == 0) return absl::OkStatus();
    if (signature.donations_size() != signature.outputs_size()) {
      return Malformed("signature lists donations for a different number of outputs");
    }
    auto byte_size = [](const proto::TensorSpec& spec) -> int64_t {
      int64_t n = c10::elementSize(static_cast<c10::ScalarType>(spec.dtype()));
      for (int64_t d : spec.sizes()) {
        if (d < 0 || (d > 0 && n > std::numeric_limits<int64_t>::max() / d)) return -1;
        n *= d;
      }
      return n;
    };
    for (int i = 0; i < signature.donations_size(); ++i) {
      const int64_t bytes = byte_size(signature.outputs(i));
      for (int32_t input : signature.donations(i).inputs()) {
        if (input < 0 || input >= signature.inputs_size() ||
            signature.input_kinds(input) != proto::Signature::DEVICE_DATA ||
            !ValidDtype(signature.inputs(input).dtype()) || bytes <= 0 ||
            byte_size(signature.inputs(input)) != bytes) {
          return Malformed(absl::StrCat("output ", i, " may not take input ", input, "'s buffer"));
        }
        out.donation_candidates[i].push_back(input);
      }
    }
    return absl::OkStatus();
  }

  // Kernel call `pi`, checked: its registers in range, its fields consistent
  // (runtime::ValidateKernelCall), its library one of `libraries`.
  absl::StatusOr<runtime::Instruction> BuildKernelCall(const proto::Instruction& pi, int index) {
    const proto::KernelCall& pk = pi.kernel();
    auto bad = [&](const std::string& what) {
      return Malformed(absl::StrCat("instruction ", index, " (kernel call): ", what));
    };
    if (pi.args_size() != 0 || pi.return_widths_size() != 0) return bad("has operator arguments or returns");
    if (pk.form() != proto::KernelCall::FLAT && pk.form() != proto::KernelCall::ROWS) {
      return bad(absl::StrCat("form ", pk.form()));
    }
    runtime::KernelCall call;
    call.form = pk.form() == proto::KernelCall::FLAT ? runtime::KernelCall::Form::kFlat
                                                     : runtime::KernelCall::Form::kRows;
    call.library = pk.library();
    call.kernel = pk.kernel();
    if (!libraries_.contains(call.library))
      return bad(absl::StrCat("library '", call.library, "' is not in the file"));
    for (int32_t r : pk.inputs()) {
      if (!InRange(r)) return bad(absl::StrCat("reads register ", r));
      call.inputs.push_back(r);
    }
    for (int32_t r : pk.scalars()) {
      if (!InRange(r)) return bad(absl::StrCat("reads register ", r));
      call.scalars.push_back(r);
    }
    for (int32_t d : pk.input_dtypes()) {
      if (!ValidDtype(d)) return bad(absl::StrCat("input dtype ", d));
      call.input_dtypes.push_back(static_cast<c10::ScalarType>(d));
    }
    for (int32_t d : pk.output_dtypes()) {
      if (!ValidDtype(d)) return bad(absl::StrCat("output dtype ", d));
      call.output_dtypes.push_back(static_cast<c10::ScalarType>(d));
    }
    call.sizes.assign(pk.sizes().begin(), pk.sizes().end());
    call.rows = pk.rows();
    call.row_length = pk.row_length();
    auto extent = [&](int32_t e) -> std::optional<runtime::kernel_abi::Extent> {
      if (e < 0 || e >= runtime::kernel_abi::kNumExtents) return std::nullopt;
      return static_cast<runtime::kernel_abi::Extent>(e);
    };
    for (int32_t e : pk.input_extents()) {
      const auto valid = extent(e);
      if (!valid) return bad(absl::StrCat("input extent ", e));
      call.input_extents.push_back(*valid);
    }
    for (int32_t e : pk.output_extents()) {
      const auto valid = extent(e);
      if (!valid) return bad(absl::StrCat("output extent ", e));
      call.output_extents.push_back(*valid);
    }
    for (const proto::IntList& sizes : pk.output_sizes()) {
      call.output_sizes.emplace_back(sizes.values().begin(), sizes.values().end());
    }
    if (absl::Status s = runtime::ValidateKernelCall(call); !s.ok()) return bad(std::string(s.message()));
    runtime::Instruction inst{std::nullopt, std::move(call), pi.op(), "", {}, {}, {}, {}};
    for (int32_t r : pi.outputs()) {
      if (!InRange(r) && r != -1) return bad(absl::StrCat("writes register ", r));
      inst.outputs.push_back(r);
    }
    if (inst.outputs.size() != inst.kernel->num_outputs()) {
      return bad(absl::StrCat(inst.outputs.size(), " output registers for ", inst.kernel->num_outputs(),
                              " outputs"));
    }
    for (int32_t r : pi.release()) {
      if (!InRange(r)) return bad(absl::StrCat("releases register ", r));
      inst.release.push_back(r);
    }
    return inst;
  }

  absl::StatusOr<runtime::Instruction> BuildInstruction(const proto::Instruction& pi, int index) {
    if (pi.has_kernel()) return BuildKernelCall(pi, index);
    absl::StatusOr<c10::OperatorHandle> op = ir::FindOperator(pi.op());
    if (!op.ok()) return Malformed(absl::StrCat("instruction ", index, ": ", op.status().message()));
    const c10::FunctionSchema& schema = op->schema();
    if (static_cast<size_t>(pi.args_size()) != schema.arguments().size()) {
      return Malformed(absl::StrCat("instruction ", index, " calls ", pi.op(), " with ", pi.args_size(),
                                    " arguments; its schema has ", schema.arguments().size()));
    }
    runtime::Instruction inst{*op, std::nullopt, pi.op(), "", {}, {}, {}, {}};
    for (const proto::ProgramArg& pa : pi.args()) {
      runtime::ProgramArg arg;
      const bool list = pa.kind() == proto::ProgramArg::REGISTER_LIST;
      for (int32_t r : pa.registers()) {
        if (!(InRange(r) || (list && r == -1))) {
          return Malformed(absl::StrCat("instruction ", index, " reads register ", r));
        }
        arg.registers.push_back(r);
      }
      switch (pa.kind()) {
        case proto::ProgramArg::REGISTER:
        case proto::ProgramArg::GENERATOR:
          if (arg.registers.size() != 1) return Malformed(absl::StrCat("instruction ", index, " argument"));
          arg.kind = pa.kind() == proto::ProgramArg::REGISTER ? runtime::ProgramArg::Kind::kRegister
                                                              : runtime::ProgramArg::Kind::kGenerator;
          break;
        case proto::ProgramArg::WRAPPED_SCALAR:
          if (arg.registers.size() != 1 || !ValidDtype(pa.dtype())) {
            return Malformed(absl::StrCat("instruction ", index, " scalar argument"));
          }
          arg.kind = runtime::ProgramArg::Kind::kWrappedScalar;
          break;
        case proto::ProgramArg::REGISTER_LIST:
          arg.kind = runtime::ProgramArg::Kind::kRegisterList;
          break;
        case proto::ProgramArg::CONSTANT: {
          arg.kind = runtime::ProgramArg::Kind::kConstant;
          absl::StatusOr<c10::IValue> v = DecodeConstant(pa.constant());
          if (!v.ok()) return v.status();
          arg.constant = *std::move(v);
          break;
        }
        default:
          return Malformed(absl::StrCat("instruction ", index, " argument kind ", pa.kind()));
      }
      if (!ValidDtype(pa.dtype()) && pa.dtype() != static_cast<int32_t>(c10::ScalarType::Undefined)) {
        return Malformed(absl::StrCat("instruction ", index, " dtype ", pa.dtype()));
      }
      arg.dtype = static_cast<c10::ScalarType>(pa.dtype());
      if (arg.kind != runtime::ProgramArg::Kind::kWrappedScalar &&
          arg.kind != runtime::ProgramArg::Kind::kRegisterList) {
        arg.dtype = c10::ScalarType::Undefined;
      }
      arg.wrapped_number = pa.wrapped_number();
      arg.copy_before_use = pa.copy_before_use();
      inst.args.push_back(std::move(arg));
    }
    for (int32_t r : pi.outputs()) {
      if (!InRange(r) && r != -1)
        return Malformed(absl::StrCat("instruction ", index, " writes register ", r));
      inst.outputs.push_back(r);
    }
    // The outputs spread over the schema's returns as the widths say, and a
    // width is a list's length only where the schema returns a list.
    if (static_cast<size_t>(pi.return_widths_size()) != schema.returns().size()) {
      return Malformed(absl::StrCat("instruction ", index, " gives ", pi.return_widths_size(),
                                    " return widths; ", pi.op(), " has ", schema.returns().size(),
                                    " returns"));
    }
    int64_t spread = 0;
    for (int r = 0; r < pi.return_widths_size(); ++r) {
      const int32_t width = pi.return_widths(r);
      const bool list = ir::Unwrapped(schema.returns()[r].type())->kind() == c10::TypeKind::ListType;
      if (list ? width < 0 : width != -1) {
        return Malformed(
            absl::StrCat("instruction ", index, " return ", r, " of ", pi.op(), " has width ", width));
      }
      spread += list ? width : 1;
      inst.return_widths.push_back(width);
    }
    if (spread != static_cast<int64_t>(inst.outputs.size())) {
      return Malformed(absl::StrCat("instruction ", index, " has ", inst.outputs.size(),
                                    " outputs; the returns of ", pi.op(), " give ", spread));
    }
    for (int32_t r : pi.release()) {
      if (!InRange(r)) return Malformed(absl::StrCat("instruction ", index, " releases register ", r));
      inst.release.push_back(r);
    }
    return inst;
  }

  const proto::Program& p_;
  const absl::flat_hash_set<std::string> libraries_;
};

}  // namespace

absl::StatusOr<LoadedNeff> ReadNeff(std::string_view bytes, const proto::CompilerFingerprint* expected) {
  if (bytes.size() < kHeaderSize) return Malformed(absl::StrCat("only ", bytes.size(), " bytes"));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) return Malformed("bad magic");
  const uint64_t version = GetLittleEndian(p + 8, 4);
  if (version != kFormatVersion) {
    // Another release's file, not a damaged one: like another compiler's, it
    // is skipped, not quarantined.
    return absl::FailedPreconditionError(
        absl::StrCat("NEFF has format version ", version, " (this reader reads ", kFormatVersion, ")"));
  }
  if (GetLittleEndian(p + 12, 4) != 0) return Malformed("reserved header bytes are not zero");
  const uint64_t length = GetLittleEndian(p + 16, 8);
  if (length > kMaxPayloadBytes || length != bytes.size() - kHeaderSize) {
    return Malformed(absl::StrCat("payload length ", length, " but ", bytes.size() - kHeaderSize,
                                  " bytes follow the header (truncated or padded)"));
  }
  const uint64_t checksum = GetLittleEndian(p + 24, 8);
  if (XXH3_64bits(p + kHeaderSize, length) != checksum) return Malformed("checksum mismatch");

  LoadedNeff loaded;
  if (!loaded.payload.ParseFromArray(p + kHeaderSize, static_cast<int>(length))) {
    return Malformed("payload is not a NeffPayload");
  }
  if (loaded.payload.format_version() != kFormatVersion) return Malformed("payload format version");
  if (loaded.payload.graph_hash().size() != 16) return Malformed("graph hash is not 16 bytes");
  if (expected != nullptr &&
      loaded.payload.fingerprint().SerializeAsString() != expected->SerializeAsString()) {
    return absl::FailedPreconditionError("NEFF was compiled by a different compiler (fingerprint mismatch)");
  }
  absl::flat_hash_set<std::string> libraries;
  for (const proto::NativeObject& object : loaded.payload.native_objects()) libraries.insert(object.name());
  absl::StatusOr<runtime::Program> program =
      ProgramBuilder(loaded.payload.program(), std::move(libraries)).Build(loaded.payload.signature());
  if (!program.ok()) return program.status();
  for (const proto::SourceEntry& entry : loaded.payload.source_map()) {
    if (entry.instruction() < 0 || static_cast<size_t>(entry.instruction()) >= program->instructions.size()) {
      return Malformed(absl::StrCat("source map names instruction ", entry.instruction()));
    }
    program->instructions[entry.instruction()].source = entry.location();
  }
  // Native objects are named by the hash of their bytes: a name that does not
  // match is a damaged file, never code to load. Reading loads nothing: the
  // runtime registers the objects when it loads the program
  // (runtime::LoadNativeObjects), so inspecting or verifying a NEFF runs no code.
  for (const proto::NativeObject& object : loaded.payload.native_objects()) {
    if (object.name() != absl::StrCat("tn_", ir::HashToHex(ir::Hash(object.code())))) {
      return Malformed(absl::StrCat("native object ", object.name(), " does not match its bytes"));
    }
  }
  for (const proto::NativeObject& object : loaded.payload.native_objects()) {
    program->native_objects.emplace_back(object.name(), object.code());
  }
  loaded.payload.clear_program();
  loaded.payload.clear_native_objects();
  loaded.program = std::make_shared<const runtime::Program>(*std::move(program));
  return loaded;
}

}  // namespace torch_neuron::neff

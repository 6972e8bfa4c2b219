#include <gtest/gtest.h>

#include <ATen/ops/_softmax.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/compile_request.h"
#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "compiler/host/host_target.h"
#include "ir/graph.h"
#include "neff/constant_codec.h"
#include "neff/neff_format.h"
#include "neff/neff_reader.h"
#include "neff/neff_writer.h"
#include "runtime/executor.h"
#include "runtime/kernel_call.h"
#include "runtime/native_library.h"

#include <xxhash.h>

namespace torch_neuron::neff {
namespace {

using ir::Arg;
using ir::Node;
using ir::Shape;
using ir::Value;

const Shape kF32_4(c10::ScalarType::Float, {4});

// x * (ones(4) + ones(4)): one parameter, one folded tensor constant. The root
// keeps the nodes alive (a CanonicalGraph only points at them).
Value SampleRoot() {
  Value x{Node::MakeDeviceData(kF32_4, nullptr), 0};
  auto ones = [] {
    return Value{
        Node::MakeOp("aten::ones", {},
                     {Arg::Attr(std::vector<int64_t>{4}),
                      Arg::Attr(static_cast<int64_t>(c10::ScalarType::Float)), Arg::Attr(c10::IValue()),
                      Arg::Attr(c10::Device(c10::DeviceType::PrivateUse1, 0)), Arg::Attr(c10::IValue())},
                     {kF32_4}),
        0};
  };
  Value twos{Node::MakeOp("aten::add.Tensor", {ones(), ones()},
                          {Arg::Operand(0), Arg::Operand(1), Arg::Attr(int64_t{1})}, {kF32_4}),
             0};
  return Value{Node::MakeOp("aten::mul.Tensor", {x, twos}, {Arg::Operand(0), Arg::Operand(1)}, {kF32_4}), 0};
}

const compiler::HostTarget& Host() {
  static const compiler::HostTarget* host = new compiler::HostTarget();
  return *host;
}

proto::CompilerFingerprint Fingerprint(const compiler::CompileOptions& options) {
  return compiler::MakeFingerprint(options, Host());
}

// `g` compiled as every graph is: its CompileRequest through the compiler.
std::string CompileToNeff(const ir::CanonicalGraph& g,
                          const compiler::CompileOptions& options = compiler::CompileOptions()) {
  absl::StatusOr<proto::CompileRequest> request = compiler::MakeCompileRequest(g, options);
  EXPECT_TRUE(request.ok()) << request.status();
  if (!request.ok()) return "";
  absl::StatusOr<compiler::CompileResult> result = compiler::Compile(*request, options, Host());
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->neff : "";
}

// The program the NEFF reader makes of `bytes` (checked against no fingerprint).
std::shared_ptr<const runtime::Program> ProgramOf(const std::string& bytes) {
  absl::StatusOr<LoadedNeff> loaded = ReadNeff(bytes, nullptr);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? loaded->program : nullptr;
}

struct Compiled {
  Value root;
  ir::CanonicalGraph graph;
  std::shared_ptr<const runtime::Program> program;
  std::string bytes;
};

Compiled CompileSample() {
  Compiled c;
  c.root = SampleRoot();
  c.graph = ir::Canonicalize({c.root});
  c.bytes = CompileToNeff(c.graph);
  c.program = ProgramOf(c.bytes);
  return c;
}

// Re-frames a (modified) payload with a valid header, to reach the checks behind the checksum.
std::string Reframe(const proto::NeffPayload& payload) {
  std::string body = payload.SerializeAsString();
  std::string header = CompileSample().bytes.substr(0, kHeaderSize);
  std::string out = header;
  uint64_t length = body.size();
  for (int i = 0; i < 8; ++i) out[16 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  uint64_t sum = XXH3_64bits(body.data(), body.size());
  for (int i = 0; i < 8; ++i) out[24 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  return out + body;
}

proto::NeffPayload Payload(const std::string& bytes) {
  proto::NeffPayload p;
  EXPECT_TRUE(p.ParseFromString(bytes.substr(kHeaderSize)));
  return p;
}

TEST(NeffTest, TheCompilersNeffRunsAndWritesBackTheSameBytes) {
  Compiled c = CompileSample();
  const proto::CompilerFingerprint fp = Fingerprint(compiler::CompileOptions());
  absl::StatusOr<LoadedNeff> loaded = ReadNeff(c.bytes, &fp);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  at::Tensor x = at::arange(4, at::kFloat);
  auto run = runtime::Execute(*loaded->program, {x});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(at::equal((*run)[0], at::mul(x, 2.0)));
  EXPECT_EQ(loaded->payload.graph_hash(), compiler::GraphHashBytes(c.graph.hash));
  // The signature the compiler wrote: one f32[4] device-data input, one f32[4]
  // output that may take its buffer.
  const proto::Signature& signature = loaded->payload.signature();
  ASSERT_EQ(signature.inputs_size(), 1);
  EXPECT_EQ(signature.input_kinds(0), proto::Signature::DEVICE_DATA);
  EXPECT_EQ(loaded->program->donation_candidates, std::vector<std::vector<int32_t>>{{0}});
  // The writer adds nothing the payload does not say.
  proto::NeffPayload payload = Payload(c.bytes);
  absl::StatusOr<std::string> again = WriteNeff(payload);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, c.bytes);
}

// GradScaler's unscale step: `(Tensor[] self_out, Tensor found_inf_out)`, a
// list return followed by a single one. Format 1 treated only a lone Tensor[]
// return as a list and wrote NEFFs its own reader rejected (and the executor
// read the list as a scalar, on the queue thread).
TEST(NeffTest, ListAndTensorReturnsRoundTripAndRun) {
  const Shape f32_3(c10::ScalarType::Float, {3});
  const Shape f32_1(c10::ScalarType::Float, {1});
  Value a{Node::MakeDeviceData(f32_3, nullptr), 0};
  Value b{Node::MakeDeviceData(f32_3, nullptr), 0};
  Value found{Node::MakeDeviceData(f32_1, nullptr), 0};
  Value inv{Node::MakeDeviceData(f32_1, nullptr), 0};
  ir::NodePtr unscale =
      Node::MakeOp("aten::_amp_foreach_non_finite_check_and_unscale", {a, b, found, inv},
                   {Arg::OperandList({0, 1}), Arg::Operand(2), Arg::Operand(3)}, {f32_3, f32_3, f32_1});
  std::vector<Value> roots{{unscale, 0}, {unscale, 1}, {unscale, 2}};
  ir::CanonicalGraph g = ir::Canonicalize(roots);
  const std::string bytes = CompileToNeff(g);
  const proto::CompilerFingerprint fp = Fingerprint(compiler::CompileOptions());
  absl::StatusOr<LoadedNeff> loaded = ReadNeff(bytes, &fp);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->program->instructions.size(), 1u);
  EXPECT_EQ(loaded->program->instructions[0].return_widths, (std::vector<int32_t>{2, -1}));

  at::Tensor grad_a = at::arange(3, at::kFloat);
  at::Tensor grad_b = at::full({3}, std::numeric_limits<float>::infinity());
  const std::vector<std::pair<const ir::Node*, at::Tensor>> values{{a.node.get(), grad_a},
                                                                   {b.node.get(), grad_b},
                                                                   {found.node.get(), at::zeros({1})},
                                                                   {inv.node.get(), at::full({1}, 0.5)}};
  std::vector<c10::IValue> params;  // in the graph's canonical parameter order
  for (int32_t p : g.parameters) {
    for (const auto& [node, value] : values) {
      if (g.nodes[p] == node) params.push_back(value);
    }
  }
  ASSERT_EQ(params.size(), 4u);
  auto run = runtime::Execute(*loaded->program, params);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->size(), 3u);
  EXPECT_TRUE(at::equal((*run)[g.root_to_output[0]], at::mul(grad_a, 0.5)));
  EXPECT_EQ((*run)[g.root_to_output[2]].item<float>(), 1.0f);  // found an inf

  // Widths that do not fit the schema or the outputs are malformed.
  proto::NeffPayload p = Payload(bytes);
  proto::NeffPayload short_list = p;
  short_list.mutable_program()->mutable_instructions(0)->set_return_widths(0, 1);
  EXPECT_EQ(ReadNeff(Reframe(short_list), nullptr).status().message(),
            "malformed NEFF: instruction 0 has 3 outputs; the returns of "
            "aten::_amp_foreach_non_finite_check_and_unscale give 2");
  proto::NeffPayload no_widths = p;
  no_widths.mutable_program()->mutable_instructions(0)->clear_return_widths();
  EXPECT_EQ(ReadNeff(Reframe(no_widths), nullptr).status().code(), absl::StatusCode::kDataLoss);
  proto::NeffPayload single_as_list = p;
  single_as_list.mutable_program()->mutable_instructions(0)->set_return_widths(1, 1);
  EXPECT_EQ(ReadNeff(Reframe(single_as_list), nullptr).status().code(), absl::StatusCode::kDataLoss);
}

TEST(NeffTest, EveryTruncationIsDataLossNeverACrash) {
  const std::string bytes = CompileSample().bytes;
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<LoadedNeff> loaded = ReadNeff(std::string_view(bytes.data(), n), nullptr);
    ASSERT_FALSE(loaded.ok()) << n;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << n;
  }
}

TEST(NeffTest, EveryFlippedByteIsDetected) {
  const std::string bytes = CompileSample().bytes;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string corrupt = bytes;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
    absl::StatusOr<LoadedNeff> loaded = ReadNeff(corrupt, nullptr);
    EXPECT_FALSE(loaded.ok()) << "flipped byte " << i << " was not detected";
  }
}

TEST(NeffTest, HeaderErrorsNameTheField) {
  std::string bytes = CompileSample().bytes;
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  EXPECT_EQ(ReadNeff(bad_magic, nullptr).status().message(), "malformed NEFF: bad magic");
  std::string bad_version = bytes;
  bad_version[8] = 1;
  EXPECT_EQ(ReadNeff(bad_version, nullptr).status(),
            absl::FailedPreconditionError("NEFF has format version 1 (this reader reads 3)"));
  EXPECT_EQ(ReadNeff(bytes + "x", nullptr).status().code(), absl::StatusCode::kDataLoss);
}

TEST(NeffTest, AnotherCompilersNeffIsRejected) {
  Compiled c = CompileSample();
  compiler::CompileOptions options;
  options.cse = false;
  const proto::CompilerFingerprint other = Fingerprint(options);
  absl::StatusOr<LoadedNeff> loaded = ReadNeff(c.bytes, &other);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(NeffTest, AChangedCompilersSourcesRejectTheOldNeffs) {
  // Same version, same options, other compiler sources (a rebuilt compiler).
  Compiled c = CompileSample();
  const proto::CompilerFingerprint current = Fingerprint(compiler::CompileOptions());
  ASSERT_TRUE(ReadNeff(c.bytes, &current).ok());
  ASSERT_EQ(current.compiler_source_id().size(), 16u);
  EXPECT_EQ(current.compiler_source_id().find_first_not_of("0123456789abcdef"), std::string::npos);
  proto::CompilerFingerprint rebuilt = current;
  rebuilt.set_compiler_source_id("0000000000000000");
  EXPECT_EQ(ReadNeff(c.bytes, &rebuilt).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(compiler::HashFingerprint(rebuilt), compiler::HashFingerprint(current));
}

TEST(NeffTest, StructuralErrorsBehindAValidChecksumAreRejected) {
  proto::NeffPayload p = Payload(CompileSample().bytes);
  proto::NeffPayload bad_register = p;
  bad_register.mutable_program()->mutable_instructions(0)->mutable_args(0)->set_registers(0, 999);
  EXPECT_EQ(ReadNeff(Reframe(bad_register), nullptr).status().message(),
            "malformed NEFF: instruction 0 reads register 999");

  proto::NeffPayload bad_op = p;
  bad_op.mutable_program()->mutable_instructions(0)->set_op("aten::no_such_op");
  EXPECT_EQ(ReadNeff(Reframe(bad_op), nullptr).status().code(), absl::StatusCode::kDataLoss);

  proto::NeffPayload bad_arity = p;
  bad_arity.mutable_program()->mutable_instructions(0)->mutable_args()->RemoveLast();
  EXPECT_EQ(ReadNeff(Reframe(bad_arity), nullptr).status().code(), absl::StatusCode::kDataLoss);

  proto::NeffPayload bad_tensor = p;
  auto* constant = bad_tensor.mutable_program()->mutable_constants(0)->mutable_value()->mutable_tensor();
  constant->set_data(constant->data().substr(1));
  EXPECT_EQ(ReadNeff(Reframe(bad_tensor), nullptr).status().message(),
            "malformed NEFF constant: tensor of 4 elements with 15 bytes");

  proto::NeffPayload bad_outputs = p;
  bad_outputs.mutable_signature()->add_outputs();
  EXPECT_EQ(ReadNeff(Reframe(bad_outputs), nullptr).status().message(),
            "malformed NEFF: signature and program disagree on the number of outputs");

  EXPECT_TRUE(ReadNeff(Reframe(p), nullptr).ok());  // the unmodified payload is fine
}

// tanh(x * 2.5) and its softmax over rows of 8 (a row kernel), and
// (x - 1) * 3 (a flat kernel), compiled at tier 1: each kernel a typed KernelCall.
struct KernelSample {
  Value x;
  ir::CanonicalGraph graph;
  std::shared_ptr<const runtime::Program> program;
  std::string bytes;
};

KernelSample CompileKernelSample() {
  const Shape f32(c10::ScalarType::Float, {4, 8});
  KernelSample k;
  k.x = Value{Node::MakeDeviceData(f32, nullptr), 0};
  Value scaled{Node::MakeOp("aten::mul.Scalar", {k.x}, {Arg::Operand(0), Arg::Attr(2.5)}, {f32}), 0};
  Value t{Node::MakeOp("aten::tanh", {scaled}, {Arg::Operand(0)}, {f32}), 0};
  Value soft{
      Node::MakeOp("aten::_softmax", {t}, {Arg::Operand(0), Arg::Attr(int64_t{-1}), Arg::Attr(false)}, {f32}),
      0};
  Value shifted{Node::MakeOp("aten::sub.Scalar", {k.x},
                             {Arg::Operand(0), Arg::Attr(1.0), Arg::Attr(int64_t{1})}, {f32}),
                0};
  Value tripled{Node::MakeOp("aten::mul.Scalar", {shifted}, {Arg::Operand(0), Arg::Attr(3.0)}, {f32}), 0};
  k.graph = ir::Canonicalize({t, soft, tripled});
  k.bytes = CompileToNeff(k.graph);
  k.program = ProgramOf(k.bytes);
  return k;
}

// A kernel call as the NEFF says it and as the reader made it.
void ExpectSameCall(const proto::KernelCall& a, const runtime::KernelCall& b) {
  EXPECT_EQ(a.form() == proto::KernelCall::FLAT, b.form == runtime::KernelCall::Form::kFlat);
  EXPECT_EQ(a.library(), b.library);
  EXPECT_EQ(a.kernel(), b.kernel);
  EXPECT_EQ(std::vector<int32_t>(a.inputs().begin(), a.inputs().end()), b.inputs);
  EXPECT_EQ(std::vector<int32_t>(a.scalars().begin(), a.scalars().end()), b.scalars);
  ASSERT_EQ(static_cast<size_t>(a.input_dtypes_size()), b.input_dtypes.size());
  for (size_t i = 0; i < b.input_dtypes.size(); ++i)
    EXPECT_EQ(a.input_dtypes(i), static_cast<int32_t>(b.input_dtypes[i]));
  ASSERT_EQ(static_cast<size_t>(a.output_dtypes_size()), b.output_dtypes.size());
  for (size_t i = 0; i < b.output_dtypes.size(); ++i)
    EXPECT_EQ(a.output_dtypes(i), static_cast<int32_t>(b.output_dtypes[i]));
  EXPECT_EQ(std::vector<int64_t>(a.sizes().begin(), a.sizes().end()), b.sizes);
  EXPECT_EQ(a.rows(), b.rows);
  EXPECT_EQ(a.row_length(), b.row_length);
  ASSERT_EQ(static_cast<size_t>(a.input_extents_size()), b.input_extents.size());
  for (size_t i = 0; i < b.input_extents.size(); ++i)
    EXPECT_EQ(a.input_extents(i), static_cast<int32_t>(b.input_extents[i]));
  ASSERT_EQ(static_cast<size_t>(a.output_extents_size()), b.output_extents.size());
  for (size_t i = 0; i < b.output_extents.size(); ++i)
    EXPECT_EQ(a.output_extents(i), static_cast<int32_t>(b.output_extents[i]));
  ASSERT_EQ(static_cast<size_t>(a.output_sizes_size()), b.output_sizes.size());
  for (size_t i = 0; i < b.output_sizes.size(); ++i) {
    EXPECT_EQ(std::vector<int64_t>(a.output_sizes(i).values().begin(), a.output_sizes(i).values().end()),
              b.output_sizes[i]);
  }
}

// The index of the program's first kernel call of `form`, or -1.
int KernelInstruction(const runtime::Program& program, runtime::KernelCall::Form form) {
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const auto& kernel = program.instructions[i].kernel;
    if (kernel && kernel->form == form) return static_cast<int>(i);
  }
  return -1;
}

TEST(NeffTest, KernelCallsRoundTripTypedAndRun) {
  KernelSample k = CompileKernelSample();
  const int flat = KernelInstruction(*k.program, runtime::KernelCall::Form::kFlat);
  const int rows = KernelInstruction(*k.program, runtime::KernelCall::Form::kRows);
  ASSERT_GE(flat, 0);
  ASSERT_GE(rows, 0);
  const runtime::KernelCall& row_call = *k.program->instructions[rows].kernel;
  EXPECT_EQ(row_call.rows, 4);
  EXPECT_EQ(row_call.row_length, 8);
  EXPECT_EQ(k.program->instructions[flat].kernel->sizes, (std::vector<int64_t>{4, 8}));
  for (const runtime::Instruction& inst : k.program->instructions) {
    EXPECT_EQ(inst.kernel.has_value(), !inst.op.has_value()) << inst.op_name;
  }

  const proto::CompilerFingerprint fp = Fingerprint(compiler::CompileOptions());
  absl::StatusOr<LoadedNeff> loaded = ReadNeff(k.bytes, &fp);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const runtime::Program& read = *loaded->program;
  const proto::NeffPayload payload = Payload(k.bytes);
  const proto::Program& written = payload.program();
  ASSERT_EQ(read.instructions.size(), static_cast<size_t>(written.instructions_size()));
  for (size_t i = 0; i < read.instructions.size(); ++i) {
    const proto::Instruction& a = written.instructions(static_cast<int>(i));
    const runtime::Instruction& b = read.instructions[i];
    EXPECT_EQ(a.op(), b.op_name);
    EXPECT_EQ(std::vector<int32_t>(a.outputs().begin(), a.outputs().end()), b.outputs);
    EXPECT_EQ(std::vector<int32_t>(a.release().begin(), a.release().end()), b.release);
    ASSERT_EQ(a.has_kernel(), b.kernel.has_value());
    if (a.has_kernel()) ExpectSameCall(a.kernel(), *b.kernel);
  }

  runtime::LoadNativeObjects(read.native_objects);
  at::Tensor x = at::arange(32, at::kFloat).reshape({4, 8}).div(16.0);
  auto run = runtime::Execute(read, {x});
  ASSERT_TRUE(run.ok()) << run.status();
  const at::Tensor t = at::tanh(at::mul(x, 2.5));
  EXPECT_TRUE(at::allclose((*run)[k.graph.root_to_output[0]], t, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose((*run)[k.graph.root_to_output[1]], at::_softmax(t, -1, false), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose((*run)[k.graph.root_to_output[2]], at::mul(at::sub(x, 1.0), 3.0), 1e-5, 1e-6));
}

TEST(NeffTest, MalformedKernelCallsAreRejected) {
  KernelSample k = CompileKernelSample();
  const int flat = KernelInstruction(*k.program, runtime::KernelCall::Form::kFlat);
  const int rows = KernelInstruction(*k.program, runtime::KernelCall::Form::kRows);
  ASSERT_GE(flat, 0);
  ASSERT_GE(rows, 0);
  proto::NeffPayload p = Payload(k.bytes);
  auto rejected = [&](const proto::NeffPayload& bad) {
    absl::Status s = ReadNeff(Reframe(bad), nullptr).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    return std::string(s.message());
  };
  auto edit = [&](int instruction, auto&& change) {
    proto::NeffPayload bad = p;
    change(*bad.mutable_program()->mutable_instructions(instruction));
    return rejected(bad);
  };
  const std::string prefix = absl::StrCat("malformed NEFF: instruction ", flat, " (kernel call): ");
  EXPECT_EQ(edit(flat, [](proto::Instruction& i) { i.mutable_kernel()->set_library("tn_elsewhere"); }),
            prefix + "library 'tn_elsewhere' is not in the file");
  EXPECT_EQ(edit(flat, [](proto::Instruction& i) { i.mutable_kernel()->set_inputs(0, 999); }),
            prefix + "reads register 999");
  EXPECT_EQ(edit(flat, [](proto::Instruction& i) { i.mutable_kernel()->add_input_dtypes(6); }),
            absl::StrCat(prefix, "kernel ", k.program->instructions[flat].kernel->kernel,
                         ": 2 input dtypes for 1 inputs"));
  EXPECT_EQ(edit(flat, [](proto::Instruction& i) { i.mutable_kernel()->set_output_dtypes(0, 999); }),
            prefix + "output dtype 999");
  EXPECT_EQ(edit(flat, [](proto::Instruction& i) { i.add_outputs(0); }),
            prefix + "2 output registers for 1 outputs");
  EXPECT_EQ(edit(flat, [](proto::Instruction& i) { i.add_return_widths(-1); }),
            prefix + "has operator arguments or returns");
  EXPECT_NE(edit(flat, [](proto::Instruction& i) { i.mutable_kernel()->set_rows(4); })
                .find("a flat call with row fields"),
            std::string::npos);
  EXPECT_NE(edit(flat, [](proto::Instruction& i) { i.mutable_kernel()->set_sizes(0, -1); }).find("bad sizes"),
            std::string::npos);
  // A row kernel's output must hold its extent of the domain: one value per
  // output (kOne) or sizes that do not match are refused, so the runtime never
  // writes past an output.
  EXPECT_NE(edit(rows, [](proto::Instruction& i) { i.mutable_kernel()->set_output_extents(0, 3); })
                .find("does not hold extent 3"),
            std::string::npos);
  EXPECT_NE(
      edit(rows, [](proto::Instruction& i) { i.mutable_kernel()->mutable_output_sizes(0)->set_values(0, 5); })
          .find("does not hold extent"),
      std::string::npos);
  EXPECT_NE(edit(rows, [](proto::Instruction& i) { i.mutable_kernel()->set_input_extents(0, 9); })
                .find("input extent 9"),
            std::string::npos);
  EXPECT_NE(
      edit(rows, [](proto::Instruction& i) { i.mutable_kernel()->set_row_length(0); }).find("bad domain"),
      std::string::npos);

  EXPECT_TRUE(ReadNeff(Reframe(p), nullptr).ok());  // the unmodified payload is fine
}

// The signature's donations are what the runtime reads to decide which input
// buffer an output may take; the reader lets through only device-data inputs of
// the output's byte size, so a damaged file can never make an output take a
// buffer too small for it.
TEST(NeffTest, DonationsAreReadAndChecked) {
  proto::NeffPayload p = Payload(CompileSample().bytes);
  p.mutable_signature()->clear_donations();
  absl::StatusOr<LoadedNeff> none = ReadNeff(Reframe(p), nullptr);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->program->donation_candidates, std::vector<std::vector<int32_t>>{{}});

  proto::NeffPayload donating = p;
  donating.mutable_signature()->add_donations()->add_inputs(0);
  absl::StatusOr<LoadedNeff> loaded = ReadNeff(Reframe(donating), nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->program->donation_candidates, std::vector<std::vector<int32_t>>{{0}});

  auto rejected = [&](const proto::NeffPayload& bad) {
    return std::string(ReadNeff(Reframe(bad), nullptr).status().message());
  };
  proto::NeffPayload out_of_range = p;
  out_of_range.mutable_signature()->add_donations()->add_inputs(1);
  EXPECT_EQ(rejected(out_of_range), "malformed NEFF: output 0 may not take input 1's buffer");

  proto::NeffPayload smaller = donating;
  smaller.mutable_signature()->mutable_inputs(0)->set_sizes(0, 3);
  EXPECT_EQ(rejected(smaller), "malformed NEFF: output 0 may not take input 0's buffer");

  proto::NeffPayload other_dtype_same_bytes = donating;  // int32[4] is 16 bytes too: allowed
  other_dtype_same_bytes.mutable_signature()->mutable_inputs(0)->set_dtype(
      static_cast<int32_t>(c10::ScalarType::Int));
  EXPECT_TRUE(ReadNeff(Reframe(other_dtype_same_bytes), nullptr).ok());

  proto::NeffPayload scalar = donating;
  scalar.mutable_signature()->set_input_kinds(0, proto::Signature::SCALAR);
  EXPECT_EQ(rejected(scalar), "malformed NEFF: output 0 may not take input 0's buffer");

  proto::NeffPayload miscounted = donating;
  miscounted.mutable_signature()->add_donations();
  EXPECT_EQ(rejected(miscounted),
            "malformed NEFF: signature lists donations for a different number of outputs");
}

TEST(CacheKeyTest, FingerprintAndEveryOptionChangeTheKeyDataDoesNot) {
  Value root = SampleRoot();
  const ir::hash_t graph = ir::Canonicalize({root}).hash;
  compiler::CompileOptions base;
  const ir::hash_t key = compiler::CacheKey(graph, Fingerprint(base));
  Value other_data = SampleRoot();  // a new device-data leaf: same key
  EXPECT_EQ(key, compiler::CacheKey(ir::Canonicalize({other_data}).hash, Fingerprint(base)));

  compiler::CompileOptions no_cse = base;
  no_cse.cse = false;
  compiler::CompileOptions no_fold = base;
  no_fold.fold_constants = false;
  compiler::CompileOptions small_fold = base;
  small_fold.max_fold_elements = 16;
  compiler::CompileOptions tier0 = base;
  tier0.opt_level = 0;
  for (const auto& options : {no_cse, no_fold, small_fold, tier0}) {
    EXPECT_NE(key, compiler::CacheKey(graph, Fingerprint(options)));
  }
  proto::CompilerFingerprint fp = Fingerprint(base);
  for (int field = 0; field < 5; ++field) {
    proto::CompilerFingerprint changed = fp;
    switch (field) {
      case 0:
        changed.set_project_version("9.9.9");
        break;
      case 1:
        changed.set_torch_version("0.0.0");
        break;
      case 2:
        changed.set_target_isa("trn1");
        break;
      case 3:
        changed.set_tier(fp.tier() + 1);
        break;
      case 4:
        changed.set_options(fp.options() + ";x=1");
        break;
    }
    EXPECT_NE(key, compiler::CacheKey(graph, changed)) << "field " << field;
  }
}

}  // namespace
}  // namespace torch_neuron::neff

namespace torch_neuron::neff {
namespace {

// Empty lists are constants too (a fused kernel's `reuse`, `sum(dim=[])`): each
// must come back as an empty list of its kind, not as a value without a kind.
TEST(ConstantCodecTest, EmptyListsRoundTrip) {
  const std::vector<c10::IValue> values = {c10::IValue(std::vector<int64_t>{}),
                                           c10::IValue(std::vector<double>{}), c10::IValue(c10::List<bool>()),
                                           c10::IValue(std::vector<int64_t>{3, -1})};
  for (const c10::IValue& v : values) {
    proto::ConstantValue encoded;
    ASSERT_TRUE(EncodeConstant(v, &encoded).ok());
    proto::ConstantValue parsed;
    ASSERT_TRUE(parsed.ParseFromString(encoded.SerializeAsString()));
    absl::StatusOr<c10::IValue> decoded = DecodeConstant(parsed);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->tagKind(), v.tagKind());
    EXPECT_TRUE(*decoded == v);
  }
}

}  // namespace
}  // namespace torch_neuron::neff

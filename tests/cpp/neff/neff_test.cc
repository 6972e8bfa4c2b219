#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mul.h>

#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "ir/graph.h"
#include "neff/constant_codec.h"
#include "neff/neff_format.h"
#include "neff/neff_reader.h"
#include "neff/neff_writer.h"
#include "runtime/executor.h"

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
    return Value{Node::MakeOp("aten::ones", {},
                              {Arg::Attr(std::vector<int64_t>{4}),
                               Arg::Attr(static_cast<int64_t>(c10::ScalarType::Float)),
                               Arg::Attr(c10::IValue()), Arg::Attr(c10::Device(c10::DeviceType::PrivateUse1, 0)),
                               Arg::Attr(c10::IValue())},
                              {kF32_4}),
                 0};
  };
  Value twos{Node::MakeOp("aten::add.Tensor", {ones(), ones()},
                          {Arg::Operand(0), Arg::Operand(1), Arg::Attr(int64_t{1})}, {kF32_4}),
             0};
  return Value{Node::MakeOp("aten::mul.Tensor", {x, twos}, {Arg::Operand(0), Arg::Operand(1)}, {kF32_4}), 0};
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
  absl::StatusOr<compiler::CompileResult> result = compiler::Compile(c.graph, compiler::CompileOptions());
  EXPECT_TRUE(result.ok()) << result.status();
  c.program = result->program;
  proto::Signature signature;
  signature.add_input_kinds(proto::Signature::DEVICE_DATA);
  signature.add_inputs()->set_dtype(static_cast<int32_t>(c10::ScalarType::Float));
  signature.mutable_inputs(0)->add_sizes(4);
  signature.add_outputs()->set_dtype(static_cast<int32_t>(c10::ScalarType::Float));
  signature.mutable_outputs(0)->add_sizes(4);
  absl::StatusOr<std::string> bytes = WriteNeff(
      {c.program.get(), compiler::MakeFingerprint(compiler::CompileOptions()), c.graph.hash, signature});
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  c.bytes = *bytes;
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

TEST(NeffTest, RoundTripRunsTheSameProgram) {
  Compiled c = CompileSample();
  const proto::CompilerFingerprint fp = compiler::MakeFingerprint(compiler::CompileOptions());
  absl::StatusOr<LoadedNeff> loaded = ReadNeff(c.bytes, &fp);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->program->instructions.size(), c.program->instructions.size());
  at::Tensor x = at::arange(4, at::kFloat);
  auto original = runtime::Execute(*c.program, {x});
  auto reloaded = runtime::Execute(*loaded->program, {x});
  ASSERT_TRUE(original.ok() && reloaded.ok());
  EXPECT_TRUE(at::equal((*reloaded)[0], at::mul(x, 2.0)));
  EXPECT_TRUE(at::equal((*reloaded)[0], (*original)[0]));
  EXPECT_EQ(loaded->payload.graph_hash().size(), 16u);
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
  bad_version[8] = 2;
  EXPECT_EQ(ReadNeff(bad_version, nullptr).status().message(),
            "malformed NEFF: format version 2 (this reader reads 1)");
  EXPECT_EQ(ReadNeff(bytes + "x", nullptr).status().code(), absl::StatusCode::kDataLoss);
}

TEST(NeffTest, AnotherCompilersNeffIsRejected) {
  Compiled c = CompileSample();
  compiler::CompileOptions options;
  options.cse = false;
  const proto::CompilerFingerprint other = compiler::MakeFingerprint(options);
  absl::StatusOr<LoadedNeff> loaded = ReadNeff(c.bytes, &other);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
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

TEST(CacheKeyTest, FingerprintAndEveryOptionChangeTheKeyDataDoesNot) {
  Value root = SampleRoot();
  const ir::hash_t graph = ir::Canonicalize({root}).hash;
  compiler::CompileOptions base;
  const ir::hash_t key = compiler::CacheKey(graph, compiler::MakeFingerprint(base));
  Value other_data = SampleRoot();  // a new device-data leaf: same key
  EXPECT_EQ(key, compiler::CacheKey(ir::Canonicalize({other_data}).hash, compiler::MakeFingerprint(base)));

  compiler::CompileOptions no_cse = base;
  no_cse.cse = false;
  compiler::CompileOptions no_fold = base;
  no_fold.fold_constants = false;
  compiler::CompileOptions small_fold = base;
  small_fold.max_fold_elements = 16;
  compiler::CompileOptions tier0 = base;
  tier0.opt_level = 0;
  for (const auto& options : {no_cse, no_fold, small_fold, tier0}) {
    EXPECT_NE(key, compiler::CacheKey(graph, compiler::MakeFingerprint(options)));
  }
  proto::CompilerFingerprint fp = compiler::MakeFingerprint(base);
  for (int field = 0; field < 5; ++field) {
    proto::CompilerFingerprint changed = fp;
    switch (field) {
      case 0: changed.set_project_version("9.9.9"); break;
      case 1: changed.set_torch_version("0.0.0"); break;
      case 2: changed.set_target_isa("trn1"); break;
      case 3: changed.set_tier(fp.tier() + 1); break;
      case 4: changed.set_options(fp.options() + ";x=1"); break;
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
  const std::vector<c10::IValue> values = {
      c10::IValue(std::vector<int64_t>{}), c10::IValue(std::vector<double>{}),
      c10::IValue(c10::List<bool>()), c10::IValue(std::vector<int64_t>{3, -1})};
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

// Positions as data (issue 49): a slice's start and end, a select's index and
// arange's bounds bound as scalar parameters compile to one program that takes
// them at run time, and a position out of range fails in the op (the CPU's
// error), never reads outside the tensor.
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/select.h>
#include <ATen/ops/slice.h>

#include "base/error_kind.h"
#include "compiler/compile_request.h"
#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "compiler/host/host_target.h"
#include "compiler/hlo_graph.h"
#include "compiler/lowering.h"
#include "ir/graph.h"
#include "lowered_program.h"
#include "neff/neff_reader.h"
#include "runtime/executor.h"

namespace torch_neuron::compiler {
namespace {

using ir::Arg;
using ir::Node;
using ir::Shape;
using ir::Value;

const Shape kF32_4x6(c10::ScalarType::Float, {4, 6});

Value Leaf(const Shape& shape) { return Value{Node::MakeDeviceData(shape, nullptr), 0}; }
Value Position(int64_t p) { return Value{Node::MakePosition(p), 0}; }

// slice_copy.Tensor(x, 1, start, end, 1): start and end are operands 1 and 2.
Value Slice(const Value& x, int64_t start, int64_t end) {
  return Value{Node::MakeOp("aten::slice_copy.Tensor", {x, Position(start), Position(end)},
                            {Arg::Operand(0), Arg::Attr(int64_t{1}), Arg::Operand(1), Arg::Operand(2),
                             Arg::Attr(int64_t{1})},
                            {Shape(c10::ScalarType::Float, {4, end - start})}),
               0};
}

// select_copy.int(x, 1, index).
Value Select(const Value& x, int64_t index) {
  return Value{Node::MakeOp("aten::select_copy.int", {x, Position(index)},
                            {Arg::Operand(0), Arg::Attr(int64_t{1}), Arg::Operand(1)},
                            {Shape(c10::ScalarType::Float, {4})}),
               0};
}

// arange.start(start, end, dtype=long): bounds as scalar parameters.
Value Arange(int64_t start, int64_t end) {
  return Value{Node::MakeOp("aten::arange.start", {Position(start), Position(end)},
                            {Arg::Operand(0), Arg::Operand(1), Arg::Attr(int64_t{4}),
                             Arg::Attr(c10::IValue()), Arg::Attr(c10::IValue()), Arg::Attr(c10::IValue())},
                            {Shape(c10::ScalarType::Long, {end - start})}),
               0};
}

runtime::Program Lower(const ir::CanonicalGraph& g) {
  absl::StatusOr<runtime::Program> program = Lowered(CompileGraph::FromCanonical(g));
  EXPECT_TRUE(program.ok()) << program.status();
  return *program;
}

// The parameter values of `g` in binding order: the input tensor, then the positions.
std::vector<c10::IValue> Bind(const ir::CanonicalGraph& g, const at::Tensor& x) {
  std::vector<c10::IValue> params;
  for (int32_t p : g.parameters) {
    const Node& n = *g.nodes[p];
    params.push_back(n.kind() == ir::NodeKind::kDeviceData ? c10::IValue(x) : c10::IValue(n.scalar()));
  }
  return params;
}

TEST(PositionsTest, SlicesAtDifferentStartsAreOneGraphAndOneProgram) {
  const at::Tensor x = at::arange(24, at::kFloat).reshape({4, 6});
  Value input = Leaf(kF32_4x6);
  ir::CanonicalGraph at1 = ir::Canonicalize({Slice(input, 1, 3)});
  ir::CanonicalGraph at4 = ir::Canonicalize({Slice(input, 4, 6)});
  ir::CanonicalGraph at0 = ir::Canonicalize({Slice(input, 0, 2)});  // 0 and 1 too: never constants
  EXPECT_EQ(at1.hash, at4.hash);
  EXPECT_EQ(at1.hash, at0.hash);
  // A longer slice is another shape: another graph.
  EXPECT_NE(ir::Canonicalize({Slice(input, 1, 4)}).hash, at1.hash);
  const runtime::Program program = Lower(at1);
  for (const ir::CanonicalGraph* g : {&at1, &at4, &at0}) {
    absl::StatusOr<std::vector<at::Tensor>> out = runtime::Execute(program, Bind(*g, x));
    ASSERT_TRUE(out.ok()) << out.status();
    const int64_t start = g->nodes[g->parameters[1]]->scalar().toLong();
    EXPECT_TRUE(at::equal((*out)[0].contiguous(), at::slice(x, 1, start, start + 2))) << start;
  }
}

TEST(PositionsTest, AnArangeOfAFixedLengthTakesItsStartAtRunTime) {
  ir::CanonicalGraph from2 = ir::Canonicalize({Arange(2, 3)});
  ir::CanonicalGraph from9 = ir::Canonicalize({Arange(9, 10)});
  EXPECT_EQ(from2.hash, from9.hash);
  const runtime::Program program = Lower(from2);
  for (const ir::CanonicalGraph* g : {&from2, &from9}) {
    absl::StatusOr<std::vector<at::Tensor>> out = runtime::Execute(program, Bind(*g, at::Tensor()));
    ASSERT_TRUE(out.ok()) << out.status();
    const int64_t start = g->nodes[g->parameters[0]]->scalar().toLong();
    EXPECT_TRUE(at::equal((*out)[0], at::arange(start, start + 1, at::kLong))) << start;
  }
}

TEST(PositionsTest, ASelectOutOfRangeFailsInTheOpWithTheCpusError) {
  const at::Tensor x = at::arange(24, at::kFloat).reshape({4, 6});
  ir::CanonicalGraph g = ir::Canonicalize({Select(Leaf(kF32_4x6), 2)});
  const runtime::Program program = Lower(g);
  std::vector<c10::IValue> params = Bind(g, x);
  absl::StatusOr<std::vector<at::Tensor>> out = runtime::Execute(program, params);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::equal((*out)[0].contiguous(), at::select(x, 1, 2)));
  // A value the tracer would have refused (its Meta kernel checks the range),
  // bound anyway: ATen's own check runs, as on the CPU.
  params[1] = c10::IValue(int64_t{6});
  out = runtime::Execute(program, params);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(ErrorKindOf(out.status()), ErrorKind::kIndex);
  EXPECT_NE(
      out.status().message().find("select(): index 6 out of range for tensor of size [4, 6] at dimension 1"),
      std::string::npos)
      << out.status().message();
}

// Size-generic graphs (issue 49 item 1): sizes traced as positions, the hash
// without sizes. The program compiled from one size runs another's trace.
Value FlatTimesTwo(const Shape& shape) {
  const int64_t numel = shape.numel();
  Value x = Leaf(shape);
  Value flat{Node::MakeOp("aten::view_copy", {x, Position(numel)}, {Arg::Operand(0), Arg::OperandList({1})},
                          {Shape(c10::ScalarType::Float, {numel})}),
             0};
  Value two{Node::MakeScalar(2.0, c10::ScalarType::Double), 0};
  return Value{Node::MakeOp("aten::mul.Tensor", {flat, two}, {Arg::Operand(0), Arg::Operand(1)},
                            {Shape(c10::ScalarType::Float, {numel})}),
               0};
}

TEST(PositionsTest, ASizeGenericProgramRunsTheTraceOfAnotherSize) {
  const Shape f32_3x5(c10::ScalarType::Float, {3, 5});
  ir::CanonicalGraph at4x6 = ir::Canonicalize({FlatTimesTwo(kF32_4x6)}, {}, nullptr, /*size_generic=*/true);
  ir::CanonicalGraph at3x5 = ir::Canonicalize({FlatTimesTwo(f32_3x5)}, {}, nullptr, /*size_generic=*/true);
  EXPECT_EQ(at4x6.hash, at3x5.hash);
  CompileOptions options;  // tier 1 asked for: a size-generic graph compiles at tier 0
  absl::StatusOr<proto::CompileRequest> request = MakeCompileRequest(at4x6, options);
  ASSERT_TRUE(request.ok()) << request.status();
  const HostTarget host;
  absl::StatusOr<CompileResult> compiled = Compile(*request, options, host);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // The NEFF names the fingerprint asked for (tier 1), though it holds a tier-0 program.
  const proto::CompilerFingerprint asked = FingerprintFor(options, host).fingerprint;
  absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(compiled->neff, &asked);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const runtime::Program& program = *loaded->program;
  EXPECT_TRUE(program.size_generic);
  EXPECT_TRUE(program.native_objects.empty());
  const at::Tensor x = at::arange(15, at::kFloat).reshape({3, 5});
  std::vector<c10::IValue> params;
  for (int32_t p : at3x5.parameters) {
    const Node& n = *at3x5.nodes[p];
    params.push_back(n.kind() == ir::NodeKind::kDeviceData ? c10::IValue(x) : c10::IValue(n.scalar()));
  }
  absl::StatusOr<std::vector<at::Tensor>> out = runtime::Execute(program, params);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::equal((*out)[0], x.reshape({15}).mul(2.0)));
}

}  // namespace
}  // namespace torch_neuron::compiler

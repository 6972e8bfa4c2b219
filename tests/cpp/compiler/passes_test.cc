#include <gtest/gtest.h>

#include "base/error_kind.h"
#include "compiler/constant_folding.h"
#include "compiler/cse.h"
#include "compiler/dce.h"
#include "compiler/foreach_expansion.h"
#include "compiler/lowering.h"
#include "lowered_program.h"
#include "compiler/pass_pipeline.h"
#include "ir/graph.h"
#include "runtime/executor.h"
#include "ir/op_traits.h"
#include "ir/op_lookup.h"
#include "absl/strings/str_split.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/add.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sub.h>

namespace torch_neuron::compiler {
namespace {

using ir::Arg;
using ir::Node;
using ir::Shape;
using ir::Value;

const Shape kF32_4(c10::ScalarType::Float, {4});

Value Leaf() { return Value{Node::MakeDeviceData(kF32_4, nullptr), 0}; }

// An op whose schema arguments are `operands`, then alpha=1 for add and sub.
Value Op(const std::string& op, std::vector<Value> operands) {
  std::vector<Arg> args;
  for (size_t i = 0; i < operands.size(); ++i) args.push_back(Arg::Operand(static_cast<int32_t>(i)));
  if (op == "aten::add.Tensor" || op == "aten::sub.Tensor") args.push_back(Arg::Attr(int64_t{1}));
  return Value{Node::MakeOp(op, std::move(operands), std::move(args), {kF32_4}), 0};
}

// aten::ones([4], dtype=float, layout=None, device=None, pin_memory=None)
Value Ones() {
  return Value{Node::MakeOp("aten::ones", {},
                            {Arg::Attr(std::vector<int64_t>{4}),
                             Arg::Attr(static_cast<int64_t>(c10::ScalarType::Float)),
                             Arg::Attr(c10::IValue()), Arg::Attr(c10::IValue()), Arg::Attr(c10::IValue())},
                            {kF32_4}),
               0};
}

// `program` of (x, y) computes (x * y + x) - y, as the CPU does.
void ExpectComputesMulAddSub(const runtime::Program& program) {
  at::Tensor x = at::arange(4, at::kFloat), y = at::full({4}, 3.0f);
  absl::StatusOr<std::vector<at::Tensor>> result = runtime::Execute(program, {x, y});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(at::equal((*result)[0], at::sub(at::add(at::mul(x, y), x), y)));
}

std::string RunPipeline(PassPipeline& pipeline, CompileGraph& g) {
  absl::StatusOr<bool> changed = pipeline.Run(g);
  EXPECT_TRUE(changed.ok()) << changed.status();
  return g.ToText();
}

TEST(CsePassTest, MergesIdenticalOpsOnTheSameOperands) {
  Value a = Leaf(), b = Leaf();
  Value out = Op("aten::add.Tensor", {Op("aten::mul.Tensor", {a, b}), Op("aten::mul.Tensor", {a, b})});
  CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({out}));
  PassPipeline pipeline;
  pipeline.AddPass<CommonSubexpressionElimination>();
  pipeline.AddPass<DeadCodeElimination>();
  EXPECT_EQ(RunPipeline(pipeline, g),
            "graph {\n"
            "  %0 = device_data : f32[4]\n"
            "  %1 = device_data : f32[4]\n"
            "  %2 = aten::mul.Tensor(%0, %1) : f32[4]\n"
            "  %4 = aten::add.Tensor(%2, %2, 1) : f32[4]\n"
            "  return (%4)\n"
            "}\n");
}

TEST(CsePassTest, DoesNotMergeOpsOnDifferentParameters) {
  Value a = Leaf(), b = Leaf();
  Value out = Op("aten::add.Tensor", {Op("aten::neg", {a}), Op("aten::neg", {b})});
  CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({out}));
  PassPipeline pipeline;
  pipeline.AddPass<CommonSubexpressionElimination>();
  absl::StatusOr<bool> changed = pipeline.Run(g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(ConstantFoldingPassTest, FoldsSmallConstantSubgraphsAndKeepsParameters) {
  Value a = Leaf();
  Value out = Op("aten::mul.Tensor", {a, Op("aten::add.Tensor", {Ones(), Ones()})});
  CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({out}));
  PassPipeline pipeline;
  pipeline.AddPass<CommonSubexpressionElimination>();
  pipeline.AddPass<ConstantFolding>(4096);
  pipeline.AddPass<DeadCodeElimination>();
  EXPECT_EQ(RunPipeline(pipeline, g),
            "graph {\n"
            "  %0 = device_data : f32[4]\n"
            "  %3 = folded(4 elements) : f32[4]\n"
            "  %4 = aten::mul.Tensor(%0, %3) : f32[4]\n"
            "  return (%4)\n"
            "}\n");
  EXPECT_TRUE(at::equal(*g.nodes[3].folded, at::full({4}, 2.0f)));
}

TEST(ConstantFoldingPassTest, LeavesLargeConstantsToRunTime) {
  Value out = Op("aten::neg", {Ones()});
  CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({out}));
  PassPipeline pipeline;
  pipeline.AddPass<ConstantFolding>(3);  // below the 4 elements of ones([4])
  absl::StatusOr<bool> changed = pipeline.Run(g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(VerifierTest, RejectsAnOperandThatIsNotBeforeItsUser) {
  Value out = Op("aten::neg", {Leaf()});
  CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({out}));
  g.nodes[1].operands[0].node = 1;  // uses itself
  absl::Status s = VerifyGraph(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "node %1 refers to node %1, which is not before it");
}

TEST(VerifierTest, RejectsAnArgumentThatReadsAMissingOperand) {
  Value out = Op("aten::neg", {Leaf()});
  CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({out}));
  g.nodes[1].args[0] = Arg::Operand(1);  // neg has one operand
  absl::Status s = VerifyGraph(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "node %1 has 1 operands, an argument reads operand 1");
}

TEST(CompileGraphTest, OutlivesTheIrItWasMadeFrom) {
  // The compile graph copies each node's op, arguments and shapes: once the
  // IR and its canonical form are gone, passes, lowering and execution still
  // see the same graph.
  CompileGraph g;
  {
    Value a = Leaf(), b = Leaf();
    Value out = Op("aten::sub.Tensor", {Op("aten::add.Tensor", {Op("aten::mul.Tensor", {a, b}), a}), b});
    ir::CanonicalGraph canonical = ir::Canonicalize({out});
    g = CompileGraph::FromCanonical(canonical);
  }
  PassPipeline pipeline;
  pipeline.AddPass<CommonSubexpressionElimination>();
  pipeline.AddPass<DeadCodeElimination>();
  EXPECT_EQ(RunPipeline(pipeline, g),
            "graph {\n"
            "  %0 = device_data : f32[4]\n"
            "  %1 = device_data : f32[4]\n"
            "  %2 = aten::mul.Tensor(%0, %1) : f32[4]\n"
            "  %3 = aten::add.Tensor(%2, %0, 1) : f32[4]\n"
            "  %4 = aten::sub.Tensor(%3, %1, 1) : f32[4]\n"
            "  return (%4)\n"
            "}\n");
  absl::StatusOr<runtime::Program> program = Lowered(g);
  ASSERT_TRUE(program.ok()) << program.status();
  ExpectComputesMulAddSub(*program);
}

TEST(LoweringTest, RunsTheGraphAndReleasesRegistersAfterLastUse) {
  Value a = Leaf(), b = Leaf();
  Value prod = Op("aten::mul.Tensor", {a, b});
  Value out = Op("aten::sub.Tensor", {Op("aten::add.Tensor", {prod, a}), b});
  CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({out}));
  absl::StatusOr<runtime::Program> program = Lowered(g);
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->instructions.size(), 3u);
  // The product dies at the add; the inputs live until their last readers.
  EXPECT_EQ(program->instructions[1].release, (std::vector<int32_t>{0, 2}));
  ExpectComputesMulAddSub(*program);
}

TEST(ExecutorTest, AFailingOpNamesItselfInTheError) {
  Value a = Leaf();
  Value bad{Node::MakeOp("aten::reshape", {a}, {Arg::Operand(0), Arg::Attr(std::vector<int64_t>{3})},
                         {Shape(c10::ScalarType::Float, {3})}),
            0};
  absl::StatusOr<runtime::Program> program = Lowered(CompileGraph::FromCanonical(ir::Canonicalize({bad})));
  ASSERT_TRUE(program.ok());
  absl::StatusOr<std::vector<at::Tensor>> result = runtime::Execute(*program, {at::arange(4, at::kFloat)});
  ASSERT_FALSE(result.ok());
  // A c10::Error, as on the CPU: a RuntimeError (UNKNOWN, not INTERNAL: the
  // user's op failed, not ours).
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(ErrorKindOf(result.status()), ErrorKind::kRuntime);
  EXPECT_EQ(result.status().message().rfind("neuron execution failed in aten::reshape: shape '[3]' is "
                                            "invalid for input of size 4",
                                            0),
            0u)
      << result.status().message();
}

// Every foreach form names two real operators, supplies each argument of the
// per-tensor schema exactly once, and takes list elements only from list
// arguments of the foreach schema.
TEST(ForeachExpansionTest, EveryFormMatchesBothSchemas) {
  ASSERT_FALSE(ForeachForms().empty());
  for (const std::string& line : ForeachForms()) {
    SCOPED_TRACE(line);
    std::vector<std::string> parts = absl::StrSplit(line, ' ');
    ASSERT_GE(parts.size(), 4u);
    ASSERT_EQ(parts[1], "->");
    absl::StatusOr<c10::OperatorHandle> list_op = ir::FindOperator(parts[0]);
    absl::StatusOr<c10::OperatorHandle> one_op = ir::FindOperator(parts[2]);
    ASSERT_TRUE(list_op.ok()) << list_op.status();
    ASSERT_TRUE(one_op.ok()) << one_op.status();
    const auto& list_args = list_op->schema().arguments();
    EXPECT_EQ(parts.size() - 3, one_op->schema().arguments().size());
    for (size_t i = 3; i < parts.size(); ++i) {
      const std::string& token = parts[i];
      if (token == "1") continue;
      ASSERT_EQ(token.size(), 2u);
      const size_t j = token[1] - '0';
      ASSERT_LT(j, list_args.size());
      const bool is_list = list_args[j].type()->kind() == c10::TypeKind::ListType;
      EXPECT_EQ(is_list, token[0] == 'L') << list_args[j].name();
    }
  }
}

// Programs may run functionalization's *_copy view ops as the views
// themselves: each pair names two real operators taking the same arguments.
TEST(ViewFormsTest, EveryCopyOpHasAViewTakingTheSameArguments) {
  for (const auto& [copy, view] : ir::ViewForms()) {
    SCOPED_TRACE(std::string(copy));
    absl::StatusOr<c10::OperatorHandle> traced = ir::FindOperator(std::string(copy));
    absl::StatusOr<c10::OperatorHandle> run = ir::FindOperator(std::string(view));
    ASSERT_TRUE(traced.ok()) << traced.status();
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(ir::TraitsOf(copy).view_form, view);
    const auto& a = traced->schema().arguments();
    const auto& b = run->schema().arguments();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      // By position: names may differ (view_copy's `size` is reshape's `shape`).
      EXPECT_EQ(a[i].type()->str(), b[i].type()->str()) << a[i].name();
      EXPECT_EQ(a[i].kwarg_only(), b[i].kwarg_only()) << a[i].name();
    }
  }
  EXPECT_TRUE(ir::TraitsOf("aten::add.Tensor").view_form.empty());
}

}  // namespace
}  // namespace torch_neuron::compiler

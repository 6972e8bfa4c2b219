#include "compiler/memory_schedule.h"

#include <gtest/gtest.h>

#include <ATen/ops/add.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/max.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sum.h>

#include <algorithm>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "compiler/lowering.h"
#include "lowered_program.h"
#include "ir/graph.h"
#include "runtime/executor.h"

namespace torch_neuron::compiler {
namespace {

using ir::Arg;
using ir::Node;
using ir::Shape;
using ir::Value;

Shape F32(std::vector<int64_t> sizes) { return Shape(c10::ScalarType::Float, std::move(sizes)); }

// Builds IR graphs of a few ATen ops and computes each value on the CPU as it
// goes: the reference the lowered programs are checked against.
class Builder {
 public:
  Value Leaf(std::vector<int64_t> sizes) {
    Value v{Node::MakeDeviceData(F32(sizes), nullptr), 0};
    return Remember(v, at::randn(sizes));
  }
  Value Exp(Value a) { return Remember(Unary("aten::exp", a), at::exp(ValueOf(a))); }
  Value Neg(Value a) { return Remember(Unary("aten::neg", a), at::neg(ValueOf(a))); }
  Value Sum(Value a) { return Remember(Reduce("aten::sum", a), at::sum(ValueOf(a))); }
  Value Mean(Value a) { return Remember(Reduce("aten::mean", a), at::mean(ValueOf(a))); }
  Value Add(Value a, Value b) {
    const at::Tensor sum = at::add(ValueOf(a), ValueOf(b));
    Value v{Node::MakeOp("aten::add.Tensor", {a, b},
                         {Arg::Operand(0), Arg::Operand(1), Arg::Attr(int64_t{1})}, {F32(sum.sizes().vec())}),
            0};
    return Remember(v, sum);
  }
  const at::Tensor& ValueOf(Value v) const { return values_.at(v.node.get()); }
  // Records the CPU's value of an output 0 made by hand.
  Value Remember(Value v, at::Tensor t) {
    values_[v.node.get()] = std::move(t);
    return v;
  }

  // Runs `program`, lowered from `canonical`, on the leaves' values; checks
  // its outputs against the CPU's and returns the bytes its instructions held
  // at once (graph.execute.peak_bytes).
  int64_t RunAndCheck(const ir::CanonicalGraph& canonical, const runtime::Program& program) const {
    std::vector<c10::IValue> parameters;
    for (int32_t p : canonical.parameters) parameters.emplace_back(values_.at(canonical.nodes[p]));
    metrics::Counter* peak = metrics::GetCounter("graph.execute.peak_bytes");
    peak->Reset();
    absl::StatusOr<std::vector<at::Tensor>> outputs = runtime::Execute(program, parameters);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    if (!outputs.ok()) return -1;
    EXPECT_EQ(outputs->size(), canonical.outputs.size());
    for (size_t i = 0; i < canonical.outputs.size() && i < outputs->size(); ++i) {
      const at::Tensor& expected = values_.at(canonical.nodes[canonical.outputs[i].first]);
      EXPECT_TRUE(at::allclose((*outputs)[i], expected)) << "output " << i;
    }
    return peak->Value();
  }

 private:
  Value Unary(const char* op, Value a) {
    return Value{Node::MakeOp(op, {a}, {Arg::Operand(0)}, {F32(ValueOf(a).sizes().vec())}), 0};
  }
  Value Reduce(const char* op, Value a) {
    return Value{Node::MakeOp(op, {a}, {Arg::Operand(0), Arg::Attr(c10::IValue())}, {F32({})}), 0};
  }
  std::map<const Node*, at::Tensor> values_;
};

std::vector<int32_t> GraphOrder(const CompileGraph& g) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!g.nodes[i].dead) order.push_back(static_cast<int32_t>(i));
  }
  return order;
}

std::vector<std::string> OpsInOrder(const CompileGraph& g, const std::vector<int32_t>& order) {
  std::vector<std::string> ops;
  for (int32_t n : order) {
    if (g.nodes[n].kind == ir::NodeKind::kOp) ops.push_back(absl::StrCat("%", n, " ", g.nodes[n].op));
  }
  return ops;
}

TEST(MemoryScheduleTest, FreesABufferBeforeAllocatingTheNext) {
  // The graph's post-order computes exp(x), its sum, then all of exp(y) while
  // exp(x) waits for its mean: two 4 KiB buffers at once. Taking the mean
  // first frees exp(x) before exp(y) exists.
  Builder b;
  Value x = b.Leaf({1024}), y = b.Leaf({1024});
  Value h = b.Exp(x);
  Value root = b.Add(b.Add(b.Sum(h), b.Sum(b.Exp(y))), b.Mean(h));
  const ir::CanonicalGraph canonical = ir::Canonicalize({root});
  const CompileGraph g = CompileGraph::FromCanonical(canonical);
  const std::vector<bool> no_views(g.nodes.size(), false);
  const std::vector<int32_t> graph_order = GraphOrder(g);
  EXPECT_EQ(OpsInOrder(g, graph_order),
            (std::vector<std::string>{"%1 aten::exp", "%2 aten::sum", "%4 aten::exp", "%5 aten::sum",
                                      "%6 aten::add.Tensor", "%7 aten::mean", "%8 aten::add.Tensor"}));
  EXPECT_EQ(SchedulePeakBytes(g, no_views, graph_order), 4096 + 4 + 4096 + 4);

  const std::vector<int32_t> order = MemorySchedule(g, no_views);
  EXPECT_EQ(OpsInOrder(g, order),
            (std::vector<std::string>{"%1 aten::exp", "%2 aten::sum", "%7 aten::mean", "%4 aten::exp",
                                      "%5 aten::sum", "%6 aten::add.Tensor", "%8 aten::add.Tensor"}));
  EXPECT_EQ(SchedulePeakBytes(g, no_views, order), 4 + 4 + 4096 + 4);

  // Lowering runs that order, and the executor's own count of the bytes its
  // instructions hold agrees with the model byte for byte.
  absl::StatusOr<runtime::Program> program = Lowered(g);
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<std::string> ran;
  for (const runtime::Instruction& inst : program->instructions) ran.push_back(inst.op_name);
  EXPECT_EQ(ran, (std::vector<std::string>{"aten::exp", "aten::sum", "aten::mean", "aten::exp", "aten::sum",
                                           "aten::add.Tensor", "aten::add.Tensor"}));
  EXPECT_EQ(b.RunAndCheck(canonical, *program), 4 + 4 + 4096 + 4);
}

TEST(MemoryScheduleTest, DefersAnAllocationUntilItIsNeeded) {
  // An optimizer's pattern: a product of a parameter (momentum * 0.9) read
  // only by the last op, which the post-order computes first and then holds
  // through a chain of bigger buffers.
  Builder b;
  Value momentum = b.Leaf({512}), x = b.Leaf({4096});
  Value scaled = b.Neg(momentum);
  Value chain = b.Sum(b.Exp(b.Exp(b.Exp(x))));
  Value root = b.Add(scaled, chain);
  const ir::CanonicalGraph canonical = ir::Canonicalize({root});
  const CompileGraph g = CompileGraph::FromCanonical(canonical);
  const std::vector<bool> no_views(g.nodes.size(), false);
  EXPECT_EQ(OpsInOrder(g, GraphOrder(g)).front(), "%1 aten::neg");
  EXPECT_EQ(SchedulePeakBytes(g, no_views, GraphOrder(g)), 2048 + 2 * 16384);
  const std::vector<int32_t> order = MemorySchedule(g, no_views);
  EXPECT_EQ(SchedulePeakBytes(g, no_views, order), 2 * 16384);
  const std::vector<std::string> ops = OpsInOrder(g, order);
  EXPECT_EQ(ops[ops.size() - 2], "%1 aten::neg");  // just before the add that reads it
  absl::StatusOr<runtime::Program> program = Lowered(g);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(b.RunAndCheck(canonical, *program), 2 * 16384);
}

TEST(MemoryScheduleTest, KeepsDrawsInTraceOrder) {
  // Two draws from one generator: the first allocates a buffer nobody needs
  // until the end; the second would free one at once. Unordered, the schedule
  // would run the second first and hand the generator's first numbers to the
  // wrong op.
  Builder b;
  Value x = b.Leaf({256}), y = b.Leaf({256});
  Value gen{Node::MakeGenerator(nullptr), 0};
  auto bernoulli = [&](Value self) {
    return Value{Node::MakeOp("aten::bernoulli.p", {self, gen},
                              {Arg::Operand(0), Arg::Attr(0.5), Arg::Operand(1)}, {F32({256})}),
                 0};
  };
  Value first = bernoulli(x);
  Value second = bernoulli(b.Exp(y));
  const ir::CanonicalGraph canonical = ir::Canonicalize({}, {first, second});
  const CompileGraph g = CompileGraph::FromCanonical(canonical);
  const std::vector<bool> no_views(g.nodes.size(), false);
  const std::vector<int32_t> order = MemorySchedule(g, no_views);
  std::vector<int32_t> draws, leaves;
  int32_t exp = -1;
  for (int32_t n : order) {
    if (g.nodes[n].op == "aten::bernoulli.p") draws.push_back(n);
    if (g.nodes[n].op == "aten::exp") exp = n;
    if (g.nodes[n].is_leaf()) leaves.push_back(n);
  }
  ASSERT_EQ(draws.size(), 2u);
  ASSERT_GE(exp, 0);
  const int32_t first_draw = g.nodes[draws[0]].operands[0].node == exp ? draws[1] : draws[0];
  const int32_t second_draw = first_draw == draws[0] ? draws[1] : draws[0];
  EXPECT_EQ(draws[0], first_draw) << "the draws ran out of trace order";
  auto with = [&](std::vector<int32_t> ops) {
    std::vector<int32_t> o = leaves;
    o.insert(o.end(), ops.begin(), ops.end());
    return o;
  };
  EXPECT_GE(SchedulePeakBytes(g, no_views, with({exp, first_draw, second_draw})), 0);
  EXPECT_GE(SchedulePeakBytes(g, no_views, with({first_draw, exp, second_draw})), 0);
  EXPECT_EQ(SchedulePeakBytes(g, no_views, with({exp, second_draw, first_draw})), -1);
}

TEST(MemoryScheduleTest, RejectsOrdersThatAreNotSchedules) {
  Builder b;
  Value x = b.Leaf({16});
  Value root = b.Neg(b.Exp(x));
  const CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({root}));
  const std::vector<bool> no_views(g.nodes.size(), false);
  EXPECT_EQ(SchedulePeakBytes(g, no_views, {0, 1, 2}), 64 + 64);
  EXPECT_EQ(SchedulePeakBytes(g, no_views, {0, 2, 1}), -1);  // neg before its operand
  EXPECT_EQ(SchedulePeakBytes(g, no_views, {0, 1}), -1);     // a node left out
  EXPECT_EQ(SchedulePeakBytes(g, no_views, {0, 1, 1}), -1);  // a node twice
}

TEST(MemoryScheduleTest, AnOutputNobodyReadsIsReleasedWhereItIsMade) {
  // max(dim) returns values and indices; the graph reads only the values. The
  // indices' register dies at the instruction that makes it, not at the end.
  Builder b;
  Value x = b.Leaf({8, 32});
  Value max{Node::MakeOp("aten::max.dim", {x}, {Arg::Operand(0), Arg::Attr(int64_t{1}), Arg::Attr(false)},
                         {F32({8}), Shape(c10::ScalarType::Long, {8})}),
            0};
  b.Remember(max, std::get<0>(at::max(b.ValueOf(x), 1)));
  Value root = b.Neg(max);
  const CompileGraph g = CompileGraph::FromCanonical(ir::Canonicalize({root}));
  absl::StatusOr<runtime::Program> program = Lowered(g);
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->instructions.size(), 2u);
  const runtime::Instruction& first = program->instructions[0];
  ASSERT_EQ(first.outputs.size(), 2u);
  EXPECT_NE(std::find(first.release.begin(), first.release.end(), first.outputs[1]), first.release.end());
}

TEST(MemoryScheduleTest, RandomGraphsNeverHoldMoreAndComputeTheSameValues) {
  // Random DAGs of exp, neg, add and sum over buffers of three sizes, with
  // random roots: the schedule is a valid order, its peak is at most the
  // graph order's, the executor holds exactly the bytes the model predicts,
  // and the outputs are the CPU's.
  std::mt19937 rng(7);
  int improved = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Builder b;
    std::vector<Value> values;
    for (int64_t size : {64, 1024, 4096}) values.push_back(b.Leaf({size}));
    const int ops = 8 + static_cast<int>(rng() % 24);
    for (int i = 0; i < ops; ++i) {
      Value a = values[rng() % values.size()];
      switch (rng() % 4) {
        case 0:
          values.push_back(b.Exp(a));
          break;
        case 1:
          values.push_back(b.Neg(a));
          break;
        case 2:
          values.push_back(b.Sum(a));
          break;
        default: {
          std::vector<Value> same;
          for (const Value& v : values) {
            if (b.ValueOf(v).sizes() == b.ValueOf(a).sizes()) same.push_back(v);
          }
          values.push_back(b.Add(a, same[rng() % same.size()]));
        }
      }
    }
    std::vector<Value> roots = {values.back()};
    for (int r = 0; r < 3; ++r) roots.push_back(values[3 + rng() % (values.size() - 3)]);
    const ir::CanonicalGraph canonical = ir::Canonicalize(roots);
    const CompileGraph g = CompileGraph::FromCanonical(canonical);
    const std::vector<bool> no_views(g.nodes.size(), false);
    const int64_t before = SchedulePeakBytes(g, no_views, GraphOrder(g));
    const int64_t after = SchedulePeakBytes(g, no_views, MemorySchedule(g, no_views));
    ASSERT_GE(after, 0) << "trial " << trial;
    EXPECT_LE(after, before) << "trial " << trial;
    improved += after < before ? 1 : 0;
    absl::StatusOr<runtime::Program> program = Lowered(g);
    ASSERT_TRUE(program.ok()) << program.status();
    EXPECT_EQ(b.RunAndCheck(canonical, *program), after) << "trial " << trial;
  }
  EXPECT_GT(improved, 0);  // the trials exercise the reordering, not only the fallback
}

}  // namespace
}  // namespace torch_neuron::compiler

#include "ir/graph.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "ir/printer.h"

namespace torch_neuron::ir {
namespace {

const Shape kF32_2x3(c10::ScalarType::Float, {2, 3});

Value Leaf(const Shape& shape = kF32_2x3) { return Value{Node::MakeDeviceData(shape, nullptr), 0}; }

Value Binary(const std::string& op, const Value& a, const Value& b, const Shape& shape = kF32_2x3) {
  return Value{Node::MakeOp(op, {a, b}, {Arg::Operand(0), Arg::Operand(1)}, {shape}), 0};
}

Value AddWithAlpha(const Value& a, const Value& b, int64_t alpha) {
  return Value{Node::MakeOp("aten::add.Tensor", {a, b}, {Arg::Operand(0), Arg::Operand(1), Arg::Attr(alpha)},
                            {a.shape()}),
               0};
}

TEST(GraphHashTest, SameComputationBuiltInDifferentOrdersHasOneHash) {
  Value a1 = Leaf(), b1 = Leaf();
  Value sum1 = Binary("aten::add.Tensor", a1, b1);
  Value prod1 = Binary("aten::mul.Tensor", a1, b1);
  CanonicalGraph g1 = Canonicalize({sum1, prod1});

  // Other leaf objects, ops created in the other order, roots given the other way round.
  Value a2 = Leaf(), b2 = Leaf();
  Value prod2 = Binary("aten::mul.Tensor", a2, b2);
  Value sum2 = Binary("aten::add.Tensor", a2, b2);
  CanonicalGraph g2 = Canonicalize({prod2, sum2});

  EXPECT_EQ(g1.hash, g2.hash);
  EXPECT_EQ(ToText(g1), ToText(g2));
  // Each root still finds its own output.
  EXPECT_EQ(g1.nodes[g1.outputs[g1.root_to_output[0]].first]->op(), "aten::add.Tensor");
  EXPECT_EQ(g2.nodes[g2.outputs[g2.root_to_output[0]].first]->op(), "aten::mul.Tensor");
}

// A size-generic graph (a torch.compile region with symbolic sizes): its hash
// has no size in it, keeps everything else, and its roots keep their order.
TEST(GraphHashTest, ASizeGenericHashLeavesOutSizesOnly) {
  auto graph = [](const Shape& shape, int64_t alpha, bool swap, bool generic) {
    Value a = Leaf(shape), b = Leaf(shape);
    Value sum = AddWithAlpha(a, b, alpha);
    Value prod = Binary("aten::mul.Tensor", a, b, shape);
    return Canonicalize(swap ? std::vector<Value>{prod, sum} : std::vector<Value>{sum, prod}, {}, nullptr,
                        generic);
  };
  const Shape f32_5x3(c10::ScalarType::Float, {5, 3});
  const Shape f32_2x3x1(c10::ScalarType::Float, {2, 3, 1});
  const Shape f64_2x3(c10::ScalarType::Double, {2, 3});
  const CanonicalGraph base = graph(kF32_2x3, 2, false, true);
  EXPECT_TRUE(base.size_generic);
  EXPECT_EQ(base.hash, graph(f32_5x3, 2, false, true).hash);        // other sizes
  EXPECT_EQ(base.hash, GraphHash(graph(f32_5x3, 2, false, true)));  // recomputed alike
  EXPECT_NE(base.hash, graph(f32_2x3x1, 2, false, true).hash);      // rank
  EXPECT_NE(base.hash, graph(f64_2x3, 2, false, true).hash);        // dtype
  EXPECT_NE(base.hash, graph(kF32_2x3, 3, false, true).hash);       // attribute
  EXPECT_NE(base.hash, graph(kF32_2x3, 2, true, true).hash);        // roots in another order
  EXPECT_EQ(base.nodes[base.outputs[0].first]->op(), "aten::add.Tensor");
  // Never the hash of the same graph canonicalized for one size.
  EXPECT_NE(base.hash, graph(kF32_2x3, 2, false, false).hash);
  EXPECT_NE(graph(kF32_2x3, 2, false, false).hash, graph(f32_5x3, 2, false, false).hash);
}

TEST(GraphHashTest, WiringOfLeavesMatters) {
  Value a = Leaf(), b = Leaf();
  EXPECT_NE(Canonicalize({Binary("aten::add.Tensor", a, b)}).hash,
            Canonicalize({Binary("aten::add.Tensor", a, a)}).hash);
}

TEST(GraphHashTest, AnyChangeOfOpAttributeShapeOrDtypeChangesTheHash) {
  Value a = Leaf(), b = Leaf();
  const hash_t base = Canonicalize({AddWithAlpha(a, b, 2)}).hash;
  EXPECT_NE(base, Canonicalize({AddWithAlpha(a, b, 3)}).hash);  // attribute
  Value sub{Node::MakeOp("aten::sub.Tensor", {a, b},
                         {Arg::Operand(0), Arg::Operand(1), Arg::Attr(int64_t{2})}, {a.shape()}),
            0};
  EXPECT_NE(base, Canonicalize({sub}).hash);  // op
  Shape f32_3x2(c10::ScalarType::Float, {3, 2});
  EXPECT_NE(base, Canonicalize({AddWithAlpha(Leaf(f32_3x2), Leaf(f32_3x2), 2)}).hash);  // shape
  Shape f64_2x3(c10::ScalarType::Double, {2, 3});
  EXPECT_NE(base, Canonicalize({AddWithAlpha(Leaf(f64_2x3), Leaf(f64_2x3), 2)}).hash);  // dtype
  EXPECT_EQ(base, Canonicalize({AddWithAlpha(Leaf(), Leaf(), 2)}).hash);                // new data: same
}

TEST(GraphHashTest, PythonScalarsAreParametersExceptZeroAndOne) {
  Value a = Leaf();
  auto times = [&](const c10::Scalar& s) {
    Value scalar{Node::MakeScalar(s, c10::ScalarType::Double), 0};
    return Canonicalize({Binary("aten::mul.Tensor", a, scalar)});
  };
  EXPECT_EQ(times(2.5).hash, times(3.5).hash);
  EXPECT_EQ(times(2.5).parameters.size(), 2u);
  EXPECT_NE(times(1.0).hash, times(2.5).hash);
  EXPECT_NE(times(0.0).hash, times(1.0).hash);
  EXPECT_EQ(times(1.0).parameters.size(), 1u);
}

TEST(GraphHashTest, ParametersAreNumberedByFirstUseAndSharedNodesAppearOnce) {
  Value a = Leaf(), b = Leaf();
  Value shared = Binary("aten::mul.Tensor", b, a);
  Value out = Binary("aten::add.Tensor", shared, Binary("aten::sub.Tensor", shared, a));
  CanonicalGraph g = Canonicalize({out, out});
  ASSERT_EQ(g.parameters.size(), 2u);
  EXPECT_EQ(g.nodes[g.parameters[0]], b.node.get());  // b is mul's first operand
  EXPECT_EQ(g.nodes[g.parameters[1]], a.node.get());
  EXPECT_EQ(g.size(), 5);
  EXPECT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.root_to_output, (std::vector<int32_t>{0, 0}));
}

TEST(GraphHashTest, HashIsStableAcrossProcesses) {
  // A fixed graph hashes to a fixed constant: disk cache keys depend on it. A
  // change here invalidates every cache on disk, so it must be deliberate
  // (the last: a node's local and structural hashes became one XXH3 each over
  // their words, in place of a HashCombine per argument, shape and operand).
  Value a = Leaf(), b = Leaf();
  CanonicalGraph g = Canonicalize({AddWithAlpha(Binary("aten::mul.Tensor", a, b), a, 1)});
  EXPECT_EQ(HashToHex(g.hash), "16b2ed3c7ed89f7a9ad9cca5425ae2bd");
}

// The outputs are part of the canonical form: the same nodes with one more
// output, or the same output read twice, hash apart or together as they should.
TEST(GraphHashTest, TheOutputsArePartOfTheHash) {
  Value a = Leaf(), b = Leaf();
  Value m = Binary("aten::mul.Tensor", a, b);
  const hash_t one = Canonicalize({m}).hash;
  EXPECT_NE(Canonicalize({m, a}).hash, one);
  EXPECT_NE(Canonicalize({a, m}).hash, Canonicalize({m}).hash);
  EXPECT_EQ(Canonicalize({m, m}).hash, one);  // one distinct output
}

TEST(GraphHashTest, DeepChainsDoNotRecurse) {
  Value v = Leaf();
  for (int i = 0; i < 20000; ++i) v = Binary("aten::add.Tensor", v, v);
  CanonicalGraph g = Canonicalize({v});
  EXPECT_EQ(g.size(), 20001);
}

// Checks what Canonicalize promises of any graph without a resolver: every
// node once, operands before users, and each operand entry naming the node and
// output the IR names.
void ExpectWellFormed(const CanonicalGraph& g) {
  std::set<const Node*> seen(g.nodes.begin(), g.nodes.end());
  ASSERT_EQ(seen.size(), g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& ops = g.nodes[i]->operands();
    auto entries = g.operands(i);
    ASSERT_EQ(entries.size(), ops.size());
    for (size_t k = 0; k < ops.size(); ++k) {
      ASSERT_LT(entries[k].first, static_cast<int32_t>(i));
      EXPECT_EQ(g.nodes[entries[k].first], ops[k].node.get());
      EXPECT_EQ(entries[k].second, ops[k].index);
    }
  }
}

// A graph of `leaves` leaves summed pairwise (a tree), each sum also feeding a
// mul with the first leaf, so nodes are shared.
Value WideGraph(int leaves, std::vector<Value>* keep) {
  std::vector<Value> level;
  for (int i = 0; i < leaves; ++i) level.push_back(Leaf());
  *keep = level;
  while (level.size() > 1) {
    std::vector<Value> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2) {
      Value sum = Binary("aten::add.Tensor", level[i], level[i + 1]);
      next.push_back(Binary("aten::mul.Tensor", sum, Binary("aten::sub.Tensor", sum, (*keep)[0])));
    }
    if (level.size() % 2 == 1) next.push_back(level.back());
    level = std::move(next);
  }
  return level[0];
}

TEST(GraphWalkTest, TheWalksTableGrowsMidWalkAndIsReusedAcrossWalks) {
  // The walk keeps its node -> position table per thread, sized by the last
  // graph. A small graph first leaves it small, so the big one grows it while
  // walking; the same graph again walks a table already big; a small one
  // after it reuses the big table. All must agree with each other.
  std::vector<Value> keep;
  const Value big = WideGraph(6000, &keep);
  const Value a = Leaf(), b = Leaf();
  const Value small = Binary("aten::add.Tensor", a, b);
  const CanonicalGraph small_first = Canonicalize({small});
  const CanonicalGraph grown = Canonicalize({big});
  const CanonicalGraph again = Canonicalize({big});
  const CanonicalGraph small_after = Canonicalize({small});
  ExpectWellFormed(grown);
  ExpectWellFormed(again);
  EXPECT_EQ(grown.size(), 6000 + 3 * 5999);
  EXPECT_EQ(grown.nodes, again.nodes);
  EXPECT_EQ(grown.operand_list, again.operand_list);
  EXPECT_EQ(grown.parameters, again.parameters);
  EXPECT_EQ(grown.hash, again.hash);
  EXPECT_EQ(grown.parameters.size(), 6000u);
  EXPECT_EQ(small_after.nodes, small_first.nodes);
  EXPECT_EQ(small_after.hash, small_first.hash);
  ExpectWellFormed(small_after);
}

// A resolver that canonicalizes another graph whenever it is asked: a walk
// that starts inside a walk on the same thread.
class CanonicalizingResolver : public ValueResolver {
 public:
  explicit CanonicalizingResolver(Value other) : other_(std::move(other)) {}
  const NodePtr* Substitute(const Node&, int) const override {
    inner_hashes_.push_back(Canonicalize({other_}).hash);
    return nullptr;
  }
  mutable std::vector<hash_t> inner_hashes_;

 private:
  Value other_;
};

TEST(GraphWalkTest, AWalkInsideAWalkHasItsOwnTable) {
  std::vector<Value> keep_outer, keep_inner;
  const Value outer = WideGraph(300, &keep_outer);
  const Value inner = WideGraph(40, &keep_inner);
  const hash_t inner_hash = Canonicalize({inner}).hash;
  const CanonicalGraph plain = Canonicalize({outer});
  CanonicalizingResolver resolver(inner);
  const CanonicalGraph nested = Canonicalize({outer}, {}, &resolver);
  EXPECT_EQ(nested.nodes, plain.nodes);
  EXPECT_EQ(nested.operand_list, plain.operand_list);
  EXPECT_EQ(nested.hash, plain.hash);
  ASSERT_FALSE(resolver.inner_hashes_.empty());
  for (hash_t h : resolver.inner_hashes_) EXPECT_EQ(h, inner_hash);
}

TEST(GraphWalkTest, ThreadsWalkingSharedNodesAtOnceAgree) {
  std::vector<Value> keep;
  const Value shared = WideGraph(2000, &keep);
  const CanonicalGraph expected = Canonicalize({shared});
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Value> own_keep;
      const Value own = WideGraph(50 + t * 700, &own_keep);  // other sizes between
      for (int i = 0; i < 20; ++i) {
        const CanonicalGraph g = Canonicalize({i % 2 == 0 ? shared : own});
        if (i % 2 == 0 && (g.nodes != expected.nodes || g.hash != expected.hash)) ++mismatches[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// Stands a fixed leaf for one node, as the lazy layer does for values that ran.
class OneSubstitution : public ValueResolver {
 public:
  OneSubstitution(const Node* ran, NodePtr leaf) : ran_(ran), leaf_(std::move(leaf)) {}
  const NodePtr* Substitute(const Node& node, int) const override { return &node == ran_ ? &leaf_ : nullptr; }

 private:
  const Node* ran_;
  NodePtr leaf_;
};

TEST(GraphResolverTest, AValueThatRanIsReadFromItsLeafAndTheGraphPinsIt) {
  Value a = Leaf(), b = Leaf();
  Value drawn{Node::MakeOp("aten::rand_like", {a}, {Arg::Operand(0)}, {kF32_2x3}), 0};
  Value sum = Binary("aten::add.Tensor", drawn, b);
  CanonicalGraph g;
  {
    // The leaf is held by the resolver only, and the resolver dies first.
    OneSubstitution ran(drawn.node.get(), Node::MakeDeviceData(kF32_2x3, nullptr));
    g = Canonicalize({sum}, {}, &ran);
  }
  // add(leaf, b): the draw and its operand are gone from the graph.
  ASSERT_EQ(g.size(), 3);
  EXPECT_EQ(g.nodes[0]->kind(), NodeKind::kDeviceData);
  EXPECT_EQ(g.parameters.size(), 2u);
  const Value c = Leaf(), d = Leaf();
  EXPECT_EQ(g.hash, Canonicalize({Binary("aten::add.Tensor", c, d)}).hash);
  // The graph holds what it points at: the substituted leaf and the root.
  drawn = {};
  sum = {};
  EXPECT_EQ(g.nodes[0]->shape(), kF32_2x3);
  EXPECT_EQ(g.nodes[2]->op(), "aten::add.Tensor");
  EXPECT_EQ(g.pinned.size(), 2u);
}

// Stands a leaf for the value of the newest step of a chain, as the lazy layer
// does for a value computed by the graph before.
class NewestRan : public ValueResolver {
 public:
  explicit NewestRan(const Node* ran) : ran_(ran), leaf_(Node::MakeDeviceData(kF32_2x3, nullptr)) {}
  const NodePtr* Substitute(const Node& node, int) const override { return &node == ran_ ? &leaf_ : nullptr; }

 private:
  const Node* ran_;
  NodePtr leaf_;
};

TEST(GraphResolverTest, RootsAreOrderedByTheGraphAsResolvedNotByTheirHistory) {
  // A value traced while the one before it was pending (generate()'s position
  // ids: each the last plus one) hashes its whole history; once the last one
  // ran, every step's graph is the same and must hash the same.
  std::set<std::string> hashes;
  for (int steps = 1; steps <= 8; ++steps) {
    Value position = Leaf();
    for (int i = 0; i < steps; ++i) position = Binary("aten::add.Tensor", position, Leaf());
    NewestRan ran(position.node.get());
    Value next = Binary("aten::add.Tensor", position, Leaf());
    Value other = Binary("aten::mul.Tensor", Leaf(), Leaf()),
          third = Binary("aten::sub.Tensor", Leaf(), Leaf());
    hashes.insert(HashToHex(Canonicalize({next, other, third}, {}, &ran).hash));
  }
  EXPECT_EQ(hashes.size(), 1u);
}

TEST(GraphResolverTest, ANullResolverPinsTheRootsOnly) {
  Value a = Leaf();
  CanonicalGraph g = Canonicalize({Binary("aten::add.Tensor", a, a), Binary("aten::mul.Tensor", a, a)});
  EXPECT_EQ(g.pinned.size(), 2u);
  EXPECT_EQ(g.size(), 3);
  EXPECT_EQ(g.nodes[2]->operands()[0].node.get(), g.nodes[0]);  // still alive: pinned
}

TEST(NodeTest, TheSourceLineIsSetAtConstructionAndNotHashed) {
  Value a = Leaf();
  NodePtr with = Node::MakeOp("aten::neg", {a}, {Arg::Operand(0)}, {kF32_2x3}, "train.py:7");
  NodePtr without = Node::MakeOp("aten::neg", {a}, {Arg::Operand(0)}, {kF32_2x3});
  EXPECT_EQ(with->source(), "train.py:7");
  EXPECT_EQ(without->source(), "");
  EXPECT_EQ(with->hash(), without->hash());
}

TEST(PrinterTest, TextNamesParametersConstantsAndOutputs) {
  Value a = Leaf();
  Value two{Node::MakeScalar(2.5, c10::ScalarType::Double), 0};
  Value one{Node::MakeScalar(int64_t{1}, c10::ScalarType::Long), 0};
  Value prod = Binary("aten::mul.Tensor", a, two);
  Value sum{Node::MakeOp("aten::add.Tensor", {prod, one, one},
                         {Arg::Operand(0), Arg::Operand(1), Arg::Operand(2)}, {kF32_2x3}),
            0};
  EXPECT_EQ(ToText(Canonicalize({sum})),
            "graph {\n"
            "  %0 = parameter(0, device_data) : f32[2,3]\n"
            "  %1 = parameter(1, scalar) : f64[]\n"
            "  %2 = aten::mul.Tensor(%0, %1) : f32[2,3]\n"
            "  %3 = constant(1) : i64[]\n"
            "  %4 = aten::add.Tensor(%2, %3, %3) : f32[2,3]\n"
            "  return (%4)\n"
            "}\n");
  std::string dot = ToDot(Canonicalize({sum}));
  EXPECT_NE(dot.find("n2 -> n4;"), std::string::npos);
  EXPECT_NE(dot.find("out0 [label=\"output 0\""), std::string::npos);
}

// A 0 or 1 is a constant of the graph: one node per thread serves every use of
// it (add's default alpha is traced on every call). Other values are graph
// parameters, a node each, so that two values that happen to be equal do not
// change the graph's structure.
TEST(ScalarNodeTest, ConstantsAreSharedAndParametersAreNot) {
  using c10::ScalarType;
  NodePtr one = Node::MakeScalar(int64_t{1}, ScalarType::Long);
  EXPECT_EQ(one->kind(), NodeKind::kConstant);
  EXPECT_EQ(Node::MakeScalar(int64_t{1}, ScalarType::Long).get(), one.get());
  EXPECT_EQ(Node::MakeScalar(int64_t{0}, ScalarType::Long)->scalar().toLong(), 0);
  // Each of these differs from `one` in what the node says: its dtype, wrapped
  // or not, the Scalar's own type, or its value.
  for (NodePtr other :
       {Node::MakeScalar(int64_t{1}, ScalarType::Int), Node::MakeScalar(int64_t{1}, ScalarType::Long, false),
        Node::MakeScalar(1.0, ScalarType::Long), Node::MakeScalar(true, ScalarType::Long),
        Node::MakeScalar(int64_t{0}, ScalarType::Long)}) {
    EXPECT_EQ(other->kind(), NodeKind::kConstant);
    EXPECT_NE(other.get(), one.get());
  }
  EXPECT_EQ(Node::MakeScalar(1.0, ScalarType::Float).get(), Node::MakeScalar(1.0, ScalarType::Float).get());
  EXPECT_EQ(Node::MakeScalar(false, ScalarType::Bool).get(), Node::MakeScalar(false, ScalarType::Bool).get());
  // -0.0 and 2.5 are parameters, never shared.
  for (double v : {-0.0, 2.5}) {
    NodePtr a = Node::MakeScalar(v, ScalarType::Double);
    EXPECT_EQ(a->kind(), NodeKind::kScalar);
    EXPECT_NE(Node::MakeScalar(v, ScalarType::Double).get(), a.get());
  }
  // Another thread has its own table.
  const Node* elsewhere = nullptr;
  std::thread([&] { elsewhere = Node::MakeScalar(int64_t{1}, ScalarType::Long).get(); }).join();
  EXPECT_NE(elsewhere, one.get());
}

}  // namespace
}  // namespace torch_neuron::ir

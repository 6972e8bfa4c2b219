#include "compiler/compile_request.h"

#include <c10/core/SymInt.h>
#include <c10/core/SymNodeImpl.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/fingerprint.h"
#include "compiler/host/host_target.h"
#include "ir/printer.h"
#include "neff/neff_reader.h"

namespace torch_neuron::compiler {
namespace {

using ir::Arg;
using ir::Node;
using ir::Shape;
using ir::Value;

const Shape kF32_2x3(c10::ScalarType::Float, {2, 3});

// A graph with every kind of node and attribute the tracer makes: device data,
// a wrapped and a tensor scalar parameter, the constants 0 and 1, a generator,
// a multi-output op, an optional-tensor list with a None, attributes of int,
// double, bool, string, None, device, dtype, int-list, bool-list and nested list.
struct Sample {
  std::vector<Value> roots, ordered;
  ir::CanonicalGraph graph;
};

Sample MakeSample() {
  Sample s;
  Value x{Node::MakeDeviceData(kF32_2x3, nullptr), 0};
  Value idx{Node::MakeDeviceData(Shape(c10::ScalarType::Long, {2}), nullptr), 0};
  Value lr{Node::MakeScalar(0.25, c10::ScalarType::Double), 0};
  Value t{Node::MakeScalar(int64_t{3}, c10::ScalarType::Long, /*wrapped_number=*/false), 0};
  Value one{Node::MakeScalar(1.0, c10::ScalarType::Double), 0};
  Value gen{Node::MakeGenerator(nullptr), 0};
  Value scaled{Node::MakeOp("aten::mul.Tensor", {x, lr}, {Arg::Operand(0), Arg::Operand(1)}, {kF32_2x3}), 0};
  Value shifted{Node::MakeOp("aten::add.Tensor", {scaled, t, one},
                             {Arg::Operand(0), Arg::Operand(1), Arg::Operand(2)}, {kF32_2x3}),
                0};
  ir::NodePtr sorted =
      Node::MakeOp("aten::sort", {shifted}, {Arg::Operand(0), Arg::Attr(int64_t{-1}), Arg::Attr(false)},
                   {kF32_2x3, Shape(c10::ScalarType::Long, {2, 3})});
  Value rows{Node::MakeOp("aten::index.Tensor", {Value{sorted, 0}, idx},
                          {Arg::Operand(0), Arg::OperandList({1, -1})}, {kF32_2x3}),
             0};
  Value drawn{Node::MakeOp("aten::bernoulli.p", {x, gen}, {Arg::Operand(0), Arg::Attr(0.5), Arg::Operand(1)},
                           {kF32_2x3}),
              0};
  Value zeros{Node::MakeOp("aten::zeros", {},
                           {Arg::Attr(std::vector<int64_t>{2, 3}),
                            Arg::Attr(static_cast<int64_t>(c10::ScalarType::Float)), Arg::Attr(c10::IValue()),
                            Arg::Attr(c10::Device(c10::DeviceType::CPU)), Arg::Attr(false)},
                           {kF32_2x3}),
              0};
  c10::impl::GenericList nested(c10::AnyType::get());
  nested.push_back(c10::IValue(int64_t{1}));
  nested.push_back(c10::IValue());
  Value tagged{Node::MakeOp("test::tagged", {zeros},
                            {Arg::Operand(0), Arg::Attr(std::string("mean")), Arg::Attr(c10::IValue(nested)),
                             Arg::Attr(c10::List<bool>({true, false}))},
                            {kF32_2x3}, "train.py:42"),
               0};
  s.roots = {rows, Value{sorted, 1}, tagged};
  s.ordered = {drawn};
  s.graph = ir::Canonicalize(s.roots, s.ordered);
  return s;
}

std::string Serialized(const ir::CanonicalGraph& g, const CompileOptions& options = CompileOptions()) {
  absl::StatusOr<proto::CompileRequest> request = MakeCompileRequest(g, options);
  EXPECT_TRUE(request.ok()) << request.status();
  return request.ok() ? request->SerializeAsString() : "";
}

TEST(CompileRequestTest, RoundTripGivesTheSameGraphHashTextAndOptions) {
  Sample s = MakeSample();
  CompileOptions options;
  options.opt_level = 0;
  options.cse = false;
  options.max_fold_elements = 77;
  options.fault_op = "aten::mul.Tensor";
  absl::StatusOr<std::unique_ptr<RequestGraph>> read = ParseCompileRequest(Serialized(s.graph, options));
  ASSERT_TRUE(read.ok()) << read.status();
  const ir::CanonicalGraph& g = (*read)->graph;
  EXPECT_EQ(g.hash, s.graph.hash);
  EXPECT_EQ(ir::ToText(g), ir::ToText(s.graph));
  EXPECT_EQ(g.parameters, s.graph.parameters);
  EXPECT_EQ(g.outputs, s.graph.outputs);
  EXPECT_EQ(g.root_to_output, s.graph.root_to_output);
  ASSERT_EQ(g.nodes.size(), s.graph.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    EXPECT_EQ(g.nodes[i]->kind(), s.graph.nodes[i]->kind()) << i;
    EXPECT_EQ(g.nodes[i]->local_hash(), s.graph.nodes[i]->local_hash()) << i;
    EXPECT_EQ(g.nodes[i]->source(), s.graph.nodes[i]->source()) << i;
  }
  const CompileOptions& o = (*read)->options;
  EXPECT_EQ(o.opt_level, 0);
  EXPECT_FALSE(o.cse);
  EXPECT_EQ(o.max_fold_elements, 77);
  EXPECT_EQ(o.fault_op, "aten::mul.Tensor");
  // Written again, the graph read back gives the same bytes.
  EXPECT_EQ(Serialized(g, o), Serialized(s.graph, options));
}

// A graph of real ops: the request of the live IR and the request written
// again from the graph read back compile to the same NEFF, byte for byte, and
// the NEFF names the graph's hash and the compiler's fingerprint.
TEST(CompileRequestTest, CompilingTheRequestGivesTheSameExecutable) {
  const Shape shape(c10::ScalarType::Float, {3});
  Value x{Node::MakeDeviceData(shape, nullptr), 0};
  Value s{Node::MakeScalar(2.5, c10::ScalarType::Double), 0};
  Value y{Node::MakeOp("aten::mul.Tensor", {x, s}, {Arg::Operand(0), Arg::Operand(1)}, {shape}), 0};
  Value z{Node::MakeOp("aten::sum", {y}, {Arg::Operand(0), Arg::Attr(c10::IValue())},
                       {Shape(c10::ScalarType::Float, {})}),
          0};
  ir::CanonicalGraph live = ir::Canonicalize({z, y});
  CompileOptions options;
  options.opt_level = 0;
  absl::StatusOr<std::unique_ptr<RequestGraph>> read = ParseCompileRequest(Serialized(live, options));
  ASSERT_TRUE(read.ok()) << read.status();
  const HostTarget target;
  auto neff_of = [&](const ir::CanonicalGraph& g, const CompileOptions& o) {
    absl::StatusOr<proto::CompileRequest> request = MakeCompileRequest(g, o);
    EXPECT_TRUE(request.ok()) << request.status();
    absl::StatusOr<CompileResult> compiled = Compile(*request, o, target);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    return compiled.ok() ? compiled->neff : "";
  };
  const std::string neff = neff_of(live, options);
  EXPECT_EQ(neff_of((*read)->graph, (*read)->options), neff);
  absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(neff, &FingerprintFor(0));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->payload.graph_hash(), GraphHashBytes(live.hash));
  EXPECT_EQ(loaded->program->instructions.size(), 2u);
}

TEST(CompileRequestTest, AnythingButAWritersRequestIsAnErrorNamingWhatIsWrong) {
  Sample s = MakeSample();
  absl::StatusOr<proto::CompileRequest> good = MakeCompileRequest(s.graph, CompileOptions());
  ASSERT_TRUE(good.ok());
  auto expect = [](const proto::CompileRequest& r, absl::StatusCode code, const std::string& text) {
    absl::StatusOr<std::unique_ptr<RequestGraph>> read = ReadCompileRequest(r);
    ASSERT_FALSE(read.ok()) << text;
    EXPECT_EQ(read.status().code(), code) << read.status();
    EXPECT_NE(read.status().message().find(text), std::string::npos) << read.status();
  };
  proto::CompileRequest r = *good;
  r.set_format_version(2);
  expect(r, absl::StatusCode::kInvalidArgument, "format 2");
  r = *good;
  r.mutable_nodes(r.nodes_size() - 1)
      ->mutable_shapes(0)
      ->add_sizes(5);  // a node changed: not the hashed graph
  expect(r, absl::StatusCode::kDataLoss, "do not hash");
  r = *good;
  r.mutable_graph_hash()->resize(3);
  expect(r, absl::StatusCode::kInvalidArgument, "16 bytes");
  // An operand that is not an earlier node (a cycle or a forward reference).
  int op = 0;
  while (r.nodes(op).kind() != proto::GraphNode::OP || r.nodes(op).operands_size() == 0) ++op;
  r = *good;
  r.mutable_nodes(op)->mutable_operands(0)->set_node(op);
  expect(r, absl::StatusCode::kInvalidArgument, "not an earlier node");
  r = *good;
  r.mutable_nodes(op)->mutable_operands(0)->set_output(9);
  expect(r, absl::StatusCode::kInvalidArgument, "operand output 9");
  r = *good;
  r.mutable_nodes(op)->mutable_args(0)->set_operands(0, 40);
  expect(r, absl::StatusCode::kInvalidArgument, "out of range");
  r = *good;
  r.mutable_nodes(0)->mutable_shapes(0)->set_dtype(999);
  expect(r, absl::StatusCode::kInvalidArgument, "dtype 999");
  r = *good;
  r.mutable_nodes(0)->mutable_shapes(0)->set_sizes(0, -4);
  expect(r, absl::StatusCode::kInvalidArgument, "size -4");
  r = *good;
  r.mutable_nodes(0)->set_kind(static_cast<proto::GraphNode::Kind>(17));
  expect(r, absl::StatusCode::kInvalidArgument, "node kind 17");
  r = *good;
  r.mutable_outputs(0)->set_node(100000);
  expect(r, absl::StatusCode::kInvalidArgument, "out of range");
  r = *good;
  r.add_root_to_output(12);
  expect(r, absl::StatusCode::kInvalidArgument, "root output 12");
  r = *good;
  r.mutable_options()->set_opt_level(7);
  expect(r, absl::StatusCode::kInvalidArgument, "opt_level=7");

  EXPECT_EQ(ParseCompileRequest("not a protobuf \xff\xff\xff").status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string big(kMaxCompileRequestBytes + 1, '\0');
  absl::StatusOr<std::unique_ptr<RequestGraph>> oversized = ParseCompileRequest(big);
  ASSERT_FALSE(oversized.ok());
  EXPECT_NE(oversized.status().message().find("the limit is"), std::string::npos);
}

TEST(CompileRequestTest, AComplexAttributeReadsBackAsTheSameComplexValue) {
  Value x{Node::MakeDeviceData(kF32_2x3, nullptr), 0};
  Value y{Node::MakeOp("aten::add.Scalar", {x},
                       {Arg::Operand(0), Arg::Attr(c10::IValue(c10::complex<double>(1.0, 2.0))),
                        Arg::Attr(int64_t{1})},
                       {kF32_2x3}),
          0};
  const ir::CanonicalGraph live = ir::Canonicalize({y});
  absl::StatusOr<std::unique_ptr<RequestGraph>> read = ParseCompileRequest(Serialized(live));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)->graph.hash, live.hash);
  const c10::IValue& attr = (*read)->graph.nodes.back()->args()[1].attr;
  ASSERT_TRUE(attr.isComplexDouble()) << attr.tagKind();
  EXPECT_EQ(attr.toComplexDouble(), c10::complex<double>(1.0, 2.0));
}

// A symbolic int with a value, as a ShapeEnv's backed SymInt: guarding on it
// gives the value.
class BackedSymInt : public c10::SymNodeImpl {
 public:
  explicit BackedSymInt(int64_t value) : value_(value) {}
  bool is_int() override { return true; }
  bool is_symbolic() override { return true; }
  bool has_hint() override { return true; }
  int64_t guard_int(const char*, int64_t) override { return value_; }
  std::string str() override { return "s" + std::to_string(value_); }

 private:
  int64_t value_;
};

c10::Scalar SymbolicInt(int64_t value) {
  return c10::Scalar(c10::SymInt(c10::SymNode(c10::make_intrusive<BackedSymInt>(value))));
}

// Symbolic scalars (a constant 1, an attribute 2 and an int list [2, 3]) are
// kept as their values (ir::Arg::ConcreteValue): the graph is the one of plain
// ints, so it has a request form, reads back, and compiles (an attribute held
// symbolic hashed unlike the int its request carried: DATA_LOSS on reading).
TEST(CompileRequestTest, SymbolicScalarsAreWrittenAsTheirValuesAndCompile) {
  ASSERT_TRUE(SymbolicInt(1).isSymbolic());
  auto graph = [](c10::Scalar one, c10::Scalar two) {
    Value x{Node::MakeDeviceData(kF32_2x3, nullptr), 0};
    Value c{Node::MakeScalar(one, c10::ScalarType::Long, /*wrapped_number=*/false), 0};
    Value y{Node::MakeOp("aten::add.Tensor", {x, c}, {Arg::Operand(0), Arg::Operand(1), Arg::Attr(two)},
                         {kF32_2x3}),
            0};
    // SymInt[] as the tracer gets it: symbolic, a list of SymInts; plain, ints.
    c10::IValue sizes(std::vector<int64_t>{2, 3});
    if (two.isSymbolic()) {
      c10::impl::GenericList symbolic(c10::SymIntType::get());
      symbolic.push_back(two.toSymInt());
      symbolic.push_back(c10::SymInt(3));
      sizes = c10::IValue(std::move(symbolic));
    }
    Value z{Node::MakeOp("aten::view_copy", {y}, {Arg::Operand(0), Arg::Attr(std::move(sizes))}, {kF32_2x3}),
            0};
    return ir::Canonicalize({z});
  };
  const ir::CanonicalGraph symbolic = graph(SymbolicInt(1), SymbolicInt(2));
  const ir::CanonicalGraph plain = graph(c10::Scalar(int64_t{1}), c10::Scalar(int64_t{2}));
  EXPECT_EQ(ir::ToText(symbolic), ir::ToText(plain));
  EXPECT_EQ(symbolic.hash, plain.hash);
  absl::StatusOr<proto::CompileRequest> request = MakeCompileRequest(symbolic, CompileOptions());
  ASSERT_TRUE(request.ok()) << request.status();
  absl::StatusOr<proto::CompileRequest> plain_request = MakeCompileRequest(plain, CompileOptions());
  ASSERT_TRUE(plain_request.ok()) << plain_request.status();
  EXPECT_EQ(request->SerializeAsString(), plain_request->SerializeAsString());
  absl::StatusOr<std::unique_ptr<RequestGraph>> read = ReadCompileRequest(*request);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)->graph.hash, symbolic.hash);
  const HostTarget host;
  absl::StatusOr<CompileResult> compiled = Compile(*request, CompileOptions{.opt_level = 0}, host);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(compiled->neff, nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->program->parameter_registers.size(), 1u);  // x only: 1 and 2 are constants
}

}  // namespace
}  // namespace torch_neuron::compiler

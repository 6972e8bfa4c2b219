#include "compiler/hlo_graph.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torch_neuron::compiler {

CompileNode CompileNode::FromIr(const ir::Node& node) {
  CompileNode n;
  n.kind = node.kind();
  n.op = node.op();
  n.args = node.args();
  n.shapes = node.shapes();
  n.scalar = node.scalar();
  n.source = node.source();
  n.local_hash = node.local_hash();
  return n;
}

CompileGraph CompileGraph::FromCanonical(const ir::CanonicalGraph& graph) {
  CompileGraph g;
  g.nodes.reserve(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    g.nodes.push_back(CompileNode::FromIr(*graph.nodes[i]));
    for (const auto& [node, index] : graph.operands(i)) g.nodes[i].operands.push_back({node, index});
  }
  for (const auto& [node, index] : graph.outputs) g.outputs.push_back({node, index});
  g.parameters = graph.parameters;
  return g;
}

bool CompileGraph::IsRandom(int32_t i) const {
  const CompileNode& n = nodes[i];
  if (n.kind != ir::NodeKind::kOp) return false;
  for (const ValueRef& v : n.operands) {
    if (nodes[v.node].kind == ir::NodeKind::kGenerator) return true;
  }
  return false;
}

int64_t CompileGraph::LiveNodeCount() const {
  int64_t n = 0;
  for (const CompileNode& node : nodes) n += node.dead ? 0 : 1;
  return n;
}

std::string CompileGraph::ToText() const {
  auto name = [&](ValueRef v) {
    return nodes[v.node].num_outputs() == 1 || nodes[v.node].folded ? absl::StrCat("%", v.node)
                                                                    : absl::StrCat("%", v.node, ".", v.index);
  };
  std::string out = "graph {\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const CompileNode& n = nodes[i];
    if (n.dead) continue;
    std::string call;
    if (n.folded) {
      call = absl::StrCat("folded(", n.folded->numel(), " elements)");
    } else if (n.is_leaf()) {
      std::ostringstream os;
      os << ir::NodeKindName(n.kind);
      if (n.kind == ir::NodeKind::kConstant) os << "(" << ir::ScalarToString(n.scalar) << ")";
      call = os.str();
    } else {
      std::vector<std::string> args;
      for (const ir::Arg& a : n.args) {
        if (a.kind == ir::Arg::Kind::kAttr) {
          std::ostringstream os;
          os << a.attr;
          args.push_back(os.str());
        } else if (a.kind == ir::Arg::Kind::kOperand) {
          args.push_back(name(n.operands[a.operands[0]]));
        } else {
          std::vector<std::string> items;
          for (int32_t k : a.operands) items.push_back(k < 0 ? "None" : name(n.operands[k]));
          args.push_back(absl::StrCat("[", absl::StrJoin(items, ", "), "]"));
        }
      }
      call = absl::StrCat(n.op, "(", absl::StrJoin(args, ", "), ")");
    }
    std::string shapes = n.shape(0).ToString();
    for (int k = 1; k < n.num_outputs() && !n.folded; ++k) {
      absl::StrAppend(&shapes, ", ", n.shape(k).ToString());
    }
    if (!n.folded && n.num_outputs() > 1) shapes = absl::StrCat("(", shapes, ")");
    absl::StrAppend(&out, "  %", i, " = ", call, " : ", shapes, "\n");
    if (n.kernel) absl::StrAppend(&out, "      # ", KernelSummary(*n.kernel), "\n");
  }
  std::vector<std::string> outs;
  for (ValueRef v : outputs) outs.push_back(name(v));
  absl::StrAppend(&out, "  return (", absl::StrJoin(outs, ", "), ")\n}\n");
  return out;
}

ValueRef NodeBuilder::Op(const std::string& op, const std::vector<Input>& inputs, const ir::Shape& shape,
                         const std::string& source) {
  CompileNode call;
  call.op = op;
  call.source = source;
  call.shapes = {shape};
  for (const Input& input : inputs) {
    if (const ValueRef* v = std::get_if<ValueRef>(&input)) {
      call.args.push_back(ir::Arg::Operand(static_cast<int32_t>(call.operands.size())));
      call.operands.push_back(*v);
    } else {
      call.args.push_back(ir::Arg::Attr(std::get<c10::IValue>(input)));
    }
  }
  call.local_hash = ir::LocalHash(call.kind, call.op, call.args, call.shapes, call.scalar);
  nodes_.push_back(std::move(call));
  return ValueRef{static_cast<int32_t>(nodes_.size() - 1), 0};
}

ValueRef NodeBuilder::One() {
  if (one_ < 0) {
    CompileNode leaf = CompileNode::FromIr(*ir::Node::MakeScalar(1, c10::ScalarType::Long));
    one_ = static_cast<int32_t>(nodes_.size());
    nodes_.push_back(std::move(leaf));
  }
  return ValueRef{one_, 0};
}

const ir::Shape& NodeBuilder::ShapeOf(ValueRef v) const { return nodes_[v.node].shape(v.index); }

const CompileNode& NodeBuilder::NodeOf(ValueRef v) const { return nodes_[v.node]; }

bool RewriteNodes(
    CompileGraph& g,
    const std::function<std::optional<std::vector<ValueRef>>(const CompileNode&, NodeBuilder&)>& expand) {
  std::vector<CompileNode> nodes;
  nodes.reserve(g.nodes.size() * 2);
  // Per old node: its new position if kept, else the values of its outputs.
  std::vector<int32_t> kept_at(g.nodes.size(), -1);
  std::vector<std::vector<ValueRef>> replaced_by(g.nodes.size());
  auto remap = [&](ValueRef v) {
    return kept_at[v.node] >= 0 ? ValueRef{kept_at[v.node], v.index} : replaced_by[v.node].at(v.index);
  };
  NodeBuilder builder(g, nodes);
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    CompileNode n = std::move(g.nodes[i]);
    for (ValueRef& v : n.operands) v = remap(v);
    std::optional<std::vector<ValueRef>> replaced;
    if (!n.dead && !n.folded && !n.kernel && n.kind == ir::NodeKind::kOp) replaced = expand(n, builder);
    if (replaced) {
      replaced_by[i] = *std::move(replaced);
      changed = true;
      continue;
    }
    kept_at[i] = static_cast<int32_t>(nodes.size());
    nodes.push_back(std::move(n));
  }
  for (ValueRef& v : g.outputs) v = remap(v);
  for (int32_t& p : g.parameters) p = kept_at[p];
  g.nodes = std::move(nodes);
  return changed;
}

}  // namespace torch_neuron::compiler

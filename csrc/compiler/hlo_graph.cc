#include "compiler/hlo_graph.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torch_neuron::compiler {

CompileGraph CompileGraph::FromCanonical(const ir::CanonicalGraph& graph) {
  CompileGraph g;
  g.nodes.resize(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    g.nodes[i].ir = graph.nodes[i];
    for (const auto& [node, index] : graph.operands[i]) g.nodes[i].operands.push_back({node, index});
  }
  for (const auto& [node, index] : graph.outputs) g.outputs.push_back({node, index});
  g.parameters = graph.parameters;
  return g;
}

int64_t CompileGraph::LiveNodeCount() const {
  int64_t n = 0;
  for (const CompileNode& node : nodes) n += node.dead ? 0 : 1;
  return n;
}

bool IsRandomOp(const ir::Node& node) {
  if (node.kind() != ir::NodeKind::kOp) return false;
  for (const ir::Value& v : node.operands()) {
    if (v.node->kind() == ir::NodeKind::kGenerator) return true;
  }
  return false;
}

std::string CompileGraph::ToText() const {
  auto name = [&](ValueRef v) {
    return nodes[v.node].ir->num_outputs() == 1 || nodes[v.node].folded
               ? absl::StrCat("%", v.node)
               : absl::StrCat("%", v.node, ".", v.index);
  };
  std::string out = "graph {\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const CompileNode& n = nodes[i];
    if (n.dead) continue;
    std::string call;
    if (n.folded) {
      call = absl::StrCat("folded(", n.folded->numel(), " elements)");
    } else if (n.ir->is_leaf()) {
      std::ostringstream os;
      os << ir::NodeKindName(n.ir->kind());
      if (n.ir->kind() == ir::NodeKind::kConstant) os << "(" << ir::ScalarToString(n.ir->scalar()) << ")";
      call = os.str();
    } else {
      std::vector<std::string> args;
      for (const ir::Arg& a : n.ir->args()) {
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
      call = absl::StrCat(n.ir->op(), "(", absl::StrJoin(args, ", "), ")");
    }
    std::string shapes = n.ir->shape(0).ToString();
    for (int k = 1; k < n.ir->num_outputs() && !n.folded; ++k) {
      absl::StrAppend(&shapes, ", ", n.ir->shape(k).ToString());
    }
    if (!n.folded && n.ir->num_outputs() > 1) shapes = absl::StrCat("(", shapes, ")");
    absl::StrAppend(&out, "  %", i, " = ", call, " : ", shapes, "\n");
    if (n.kernel) absl::StrAppend(&out, "      # ", KernelSummary(*n.kernel), "\n");
  }
  std::vector<std::string> outs;
  for (ValueRef v : outputs) outs.push_back(name(v));
  absl::StrAppend(&out, "  return (", absl::StrJoin(outs, ", "), ")\n}\n");
  return out;
}

}  // namespace torch_neuron::compiler

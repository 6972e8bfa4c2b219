#include "ir/printer.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torch_neuron::ir {
namespace {

std::string ValueName(std::pair<int32_t, int32_t> v, const CanonicalGraph& g) {
  const Node* n = g.nodes[v.first];
  if (n->num_outputs() == 1) return absl::StrCat("%", v.first);
  return absl::StrCat("%", v.first, ".", v.second);
}

std::string AttrText(const c10::IValue& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string ScalarText(const c10::Scalar& s) { return ScalarToString(s); }

std::string ShapesText(const Node* n) {
  std::vector<std::string> parts;
  for (const Shape& s : n->shapes()) parts.push_back(s.ToString());
  return parts.size() == 1 ? parts[0] : absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

// The node's call, e.g. "aten::add.Tensor(%0, %1, alpha=%2)"; leaves name their kind.
std::string CallText(const CanonicalGraph& g, size_t i, int parameter_number) {
  const Node* n = g.nodes[i];
  switch (n->kind()) {
    case NodeKind::kDeviceData:
      return absl::StrCat("parameter(", parameter_number, ", device_data)");
    case NodeKind::kScalar:
      return absl::StrCat("parameter(", parameter_number, ", scalar)");
    case NodeKind::kGenerator:
      return absl::StrCat("parameter(", parameter_number, ", generator)");
    case NodeKind::kConstant:
      return absl::StrCat("constant(", ScalarText(n->scalar()), ")");
    case NodeKind::kOp:
      break;
  }
  std::vector<std::string> args;
  for (const Arg& a : n->args()) {
    if (a.kind == Arg::Kind::kAttr) {
      args.push_back(AttrText(a.attr));
    } else if (a.kind == Arg::Kind::kOperand) {
      args.push_back(ValueName(g.operands(i)[a.operands[0]], g));
    } else {
      std::vector<std::string> items;
      for (int32_t k : a.operands) {
        items.push_back(k < 0 ? "None" : ValueName(g.operands(i)[k], g));
      }
      args.push_back(absl::StrCat("[", absl::StrJoin(items, ", "), "]"));
    }
  }
  return absl::StrCat(n->op(), "(", absl::StrJoin(args, ", "), ")");
}

}  // namespace

std::string ToText(const CanonicalGraph& g) {
  std::string out = "graph {\n";
  int parameter = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node* n = g.nodes[i];
    const int number = n->is_parameter() ? parameter++ : -1;
    absl::StrAppend(&out, "  %", i, " = ", CallText(g, i, number), " : ", ShapesText(n));
    if (!n->source().empty()) absl::StrAppend(&out, "  # ", n->source());
    out += "\n";
  }
  std::vector<std::string> outputs;
  for (const auto& o : g.outputs) outputs.push_back(ValueName(o, g));
  absl::StrAppend(&out, "  return (", absl::StrJoin(outputs, ", "), ")\n}\n");
  return out;
}

std::string ToDot(const CanonicalGraph& g) {
  std::string out = "digraph G {\n  node [shape=box, fontname=\"monospace\"];\n";
  int parameter = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node* n = g.nodes[i];
    const int number = n->is_parameter() ? parameter++ : -1;
    std::string label = n->is_leaf() ? CallText(g, i, number) : n->op();
    absl::StrAppend(&out, "  n", i, " [label=\"%", i, " ", label, "\\n", ShapesText(n), "\"",
                    n->is_leaf() ? ", style=rounded" : "", "];\n");
    for (size_t k = 0; k < g.operands(i).size(); ++k) {
      absl::StrAppend(&out, "  n", g.operands(i)[k].first, " -> n", i, ";\n");
    }
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    absl::StrAppend(&out, "  out", k, " [label=\"output ", k, "\", shape=plaintext];\n  n",
                    g.outputs[k].first, " -> out", k, ";\n");
  }
  out += "}\n";
  return out;
}

}  // namespace torch_neuron::ir

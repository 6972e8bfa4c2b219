// The IR verifier: run by the pass pipeline before the first pass and after every
// pass that changed the graph.
#include "absl/strings/str_cat.h"
#include "compiler/pass_pipeline.h"

namespace torch_neuron::compiler {
namespace {

absl::Status CheckRef(const CompileGraph& g, ValueRef v, int32_t limit, const std::string& what) {
  if (v.node < 0 || v.node >= limit) {
    return absl::InternalError(absl::StrCat(what, " refers to node %", v.node, ", which is not before it"));
  }
  const CompileNode& n = g.nodes[v.node];
  if (n.dead) return absl::InternalError(absl::StrCat(what, " uses dead node %", v.node));
  if (!n.folded && (v.index < 0 || v.index >= n.num_outputs())) {
    return absl::InternalError(
        absl::StrCat(what, " uses output ", v.index, " of %", v.node, ", which has ", n.num_outputs()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyGraph(const CompileGraph& g) {
  const int32_t size = static_cast<int32_t>(g.nodes.size());
  for (int32_t i = 0; i < size; ++i) {
    const CompileNode& n = g.nodes[i];
    if (n.dead) continue;
    if (!n.folded && n.num_outputs() == 0)
      return absl::InternalError(absl::StrCat("node %", i, " has no shape"));
    // Every operand argument names one of the node's operands (-1: None in a list).
    for (const ir::Arg& arg : n.args) {
      if (n.folded) break;  // a folded node reads nothing
      for (int32_t k : arg.operands) {
        if (k >= static_cast<int32_t>(n.operands.size()) ||
            (k < 0 && arg.kind != ir::Arg::Kind::kOperandList)) {
          return absl::InternalError(absl::StrCat("node %", i, " has ", n.operands.size(),
                                                  " operands, an argument reads operand ", k));
        }
      }
    }
    for (ValueRef v : n.operands) {
      absl::Status s = CheckRef(g, v, i, absl::StrCat("node %", i));
      if (!s.ok()) return s;
    }
  }
  for (ValueRef v : g.outputs) {
    absl::Status s = CheckRef(g, v, size, "an output");
    if (!s.ok()) return s;
  }
  for (int32_t p : g.parameters) {
    if (p < 0 || p >= size || g.nodes[p].dead || !g.nodes[p].is_parameter()) {
      return absl::InternalError(absl::StrCat("parameter %", p, " is missing"));
    }
  }
  return absl::OkStatus();
}

}  // namespace torch_neuron::compiler

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
  if (!n.folded && (v.index < 0 || v.index >= n.ir->num_outputs())) {
    return absl::InternalError(
        absl::StrCat(what, " uses output ", v.index, " of %", v.node, ", which has ", n.ir->num_outputs()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyGraph(const CompileGraph& g) {
  const int32_t size = static_cast<int32_t>(g.nodes.size());
  for (int32_t i = 0; i < size; ++i) {
    const CompileNode& n = g.nodes[i];
    if (n.dead) continue;
    if (n.ir == nullptr) return absl::InternalError(absl::StrCat("node %", i, " has no IR"));
    if (!n.folded && n.operands.size() != n.ir->operands().size()) {
      return absl::InternalError(absl::StrCat("node %", i, " has ", n.operands.size(), " operands, its IR ",
                                              n.ir->operands().size()));
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
    if (p < 0 || p >= size || g.nodes[p].dead || !g.nodes[p].ir->is_parameter()) {
      return absl::InternalError(absl::StrCat("parameter %", p, " is missing"));
    }
  }
  return absl::OkStatus();
}

}  // namespace torch_neuron::compiler

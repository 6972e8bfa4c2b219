#include "compiler/dce.h"

namespace torch_neuron::compiler {

absl::StatusOr<bool> DeadCodeElimination::Run(CompileGraph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (ValueRef v : g.outputs) live[v.node] = true;
  for (int32_t p : g.parameters) live[p] = true;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!g.nodes[i].dead && g.IsRandom(static_cast<int32_t>(i))) live[i] = true;
  }
  // Operands precede users: one backward sweep reaches every live node.
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (!live[i] || g.nodes[i].dead) continue;
    for (ValueRef v : g.nodes[i].operands) live[v.node] = true;
  }
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i] && !g.nodes[i].dead) {
      g.nodes[i].dead = true;
      changed = true;
    }
  }
  return changed;
}

}  // namespace torch_neuron::compiler

#include "compiler/cse.h"

#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "ir/hash.h"

namespace torch_neuron::compiler {

absl::StatusOr<bool> CommonSubexpressionElimination::Run(CompileGraph& g) {
  // replacement[i] = the node that stands for node i (itself if kept).
  std::vector<int32_t> replacement(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) replacement[i] = static_cast<int32_t>(i);
  absl::flat_hash_map<ir::hash_t, std::vector<int32_t>> seen;
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    CompileNode& n = g.nodes[i];
    if (n.dead) continue;
    for (ValueRef& v : n.operands) v.node = replacement[v.node];
    if (n.is_parameter() || n.folded || g.IsRandom(static_cast<int32_t>(i))) continue;
    ir::hash_t key = n.local_hash;
    for (ValueRef v : n.operands) key = ir::HashCombine(key, ir::MHash(v.node, v.index));
    auto& candidates = seen[key];
    bool merged = false;
    for (int32_t c : candidates) {
      const CompileNode& other = g.nodes[c];
      if (other.local_hash == n.local_hash && other.operands == n.operands) {
        replacement[i] = c;
        n.dead = true;
        merged = changed = true;
        break;
      }
    }
    if (!merged) candidates.push_back(static_cast<int32_t>(i));
  }
  for (ValueRef& v : g.outputs) v.node = replacement[v.node];
  return changed;
}

}  // namespace torch_neuron::compiler

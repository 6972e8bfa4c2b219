#include "lazy/graph_growth.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace torch_neuron::lazy {

GraphGrowthWatch& GraphGrowthWatch::Global() {
  static auto* watch = new GraphGrowthWatch();
  return *watch;
}

std::string GraphGrowthWatch::NoteCompile(const std::string& place, const ir::CanonicalGraph& graph) {
  absl::MutexLock lock(&mu_);
  if (warned_) return "";
  const int64_t nodes = graph.size();
  absl::flat_hash_set<ir::hash_t> ops;
  for (const ir::Node* n : graph.nodes) {
    if (n->kind() == ir::NodeKind::kOp) ops.insert(n->hash());
  }
  History& h = places_[place];
  // Most of the last graph's ops come along again (not all: the op that made
  // the value read last time, a loss, is needed by nothing later).
  const int64_t kept =
      std::count_if(h.last_ops.begin(), h.last_ops.end(), [&](ir::hash_t op) { return ops.contains(op); });
  const bool holds_last = 4 * kept >= 3 * static_cast<int64_t>(h.last_ops.size());
  if (h.streak > 0 && nodes > h.last_nodes && holds_last) {
    ++h.streak;
    absl::StrAppend(&h.sizes, " -> ", nodes);
  } else {
    h.streak = 1;
    h.sizes = absl::StrCat(nodes);
  }
  h.last_nodes = nodes;
  h.last_ops = std::move(ops);
  if (h.streak < kStreak) return "";
  warned_ = true;
  return absl::StrCat(
      "torch_neuron: the graph compiled when syncing at ", place.empty() ? "<unknown>" : place,
      " has grown on each of the last ", kStreak, " compiles (", h.sizes,
      " nodes): work is piling up between syncs, and every step recompiles. Reading a value "
      "(.item(), .cpu(), print) runs only what that value needs; call torch_neuron.mark_step() "
      "once per step (after optimizer.step()) to run the whole step.");
}

}  // namespace torch_neuron::lazy

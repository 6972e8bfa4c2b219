#include "lazy/graph_growth.h"

#include "absl/strings/str_cat.h"

namespace torch_neuron::lazy {

GraphGrowthWatch& GraphGrowthWatch::Global() {
  static auto* watch = new GraphGrowthWatch();
  return *watch;
}

std::string GraphGrowthWatch::NoteCompile(const std::string& place, int64_t nodes) {
  absl::MutexLock lock(&mu_);
  if (warned_) return "";
  History& h = places_[place];
  if (h.streak > 0 && nodes > h.last_nodes) {
    ++h.streak;
    absl::StrAppend(&h.sizes, " -> ", nodes);
  } else {
    h.streak = 1;
    h.sizes = absl::StrCat(nodes);
  }
  h.last_nodes = nodes;
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

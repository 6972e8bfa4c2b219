// GraphGrowthWatch: warns once when graphs keep growing from one place.
//
// A loop that reads a value each step (.item(), .cpu(), print) but never calls
// mark_step syncs only what it reads: the rest of the step (the optimizer's
// updates) stays pending, and the next read compiles a graph that carries every
// earlier step along, larger and slower each time, recompiled every step. A
// partial sync that compiles a graph holding most ops of the last graph
// compiled at the same user line, and more, several times in a row, is that
// pattern (graphs that merely grow, such as one op on ever larger inputs, are
// not: their nodes differ); the warning names the line and the fix, as
// torch_xla's debug mode does.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "ir/graph.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::lazy {

class GraphGrowthWatch {
 public:
  // Growing compiles in a row, at one place, that make the warning.
  static constexpr int kStreak = 4;

  static GraphGrowthWatch& Global();

  // A partial sync at `place` compiled `graph`. Returns the warning's text the
  // first time a place reaches the streak, "" otherwise.
  std::string NoteCompile(const std::string& place, const ir::CanonicalGraph& graph);

 private:
  struct History {
    absl::flat_hash_set<ir::hash_t> last_ops;  // hashes of the last graph's op nodes
    int64_t last_nodes = 0;
    int streak = 0;  // growing compiles in a row
    std::string sizes;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, History> places_ ABSL_GUARDED_BY(mu_);
  bool warned_ ABSL_GUARDED_BY(mu_) = false;  // once per process
};

}  // namespace torch_neuron::lazy

// NodeInterner: hash-consing of op nodes. Tracing the same op on the same
// operands twice (autograd regenerating a view, a transposed weight used by the
// forward and the backward pass) yields the one node both times, so the same
// computation always builds the same DAG and hashes the same from step to step.
//
// Nodes are keyed by their local hash and the identity of their operands, and
// held weakly: an entry dies with its node. Random ops are never interned (two
// draws are two nodes). Thread-safe.
#pragma once

#include <cstddef>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "ir/node.h"

namespace torch_neuron::ir {

class NodeInterner {
 public:
  // The existing node equal to `node` if there is one, else `node` (now interned).
  NodePtr Intern(NodePtr node);

  // Drops entries whose nodes died.
  void Purge();

  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<hash_t, std::weak_ptr<const Node>> nodes_ ABSL_GUARDED_BY(mu_);
  size_t purge_at_ ABSL_GUARDED_BY(mu_) = 4096;
};

}  // namespace torch_neuron::ir

// RanValues: which IR values have run, and the device-data leaves that stand
// for their results from then on.
//
// A random op that ran must never run again (a graph built later that reads
// the draw reads its result, or it would draw anew); an op eager mode ran is
// read from its buffer rather than recomputed. The IR is immutable, so this
// knowledge lives here, keyed by node, and reaches Canonicalize through the
// ir::ValueResolver that Resolver() gives.
//
// An entry lives as long as its node: it holds the node weakly and its leaves
// (and so their buffers) strongly. Entries whose node died are swept by
// Sweep(), which the lazy layer calls where a node can die (a tensor dropping
// its pending value, the end of a sync), and by Record: all of them while the
// table is small, else once it has doubled. So a dead node's buffers go when
// its last tensor does, as they did when the node held them. An address reused
// by a new node never resolves to the old node's leaves: the entry's weak
// pointer has expired by then. Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "ir/graph.h"
#include "ir/node.h"

namespace torch_neuron::lazy {

class RanValues {
 public:
  static RanValues& Global();

  // `node` ran: `leaves[k]` stands for its output k from now on. A node
  // records once; a second Record for it is ignored.
  void Record(const ir::NodePtr& node, std::vector<ir::NodePtr> leaves);

  // Drops the entries of nodes that died (see above). Nothing recorded: one
  // relaxed load.
  void Sweep();

  bool HasRun(const ir::Node& node) const;
  // The leaves `node` ran into (empty when it has not run).
  std::vector<ir::NodePtr> Leaves(const ir::Node& node) const;
  // `v`, or the leaf standing for it when its node has run.
  ir::Value Resolve(const ir::Value& v) const;

  // A resolver for Canonicalize that holds the table's lock while it lives
  // (one lock for a whole graph, not one per operand): build the graph, then
  // let it go before recording. Nothing recorded yet: no lock, no lookups.
  class ScopedResolver : public ir::ValueResolver {
   public:
    explicit ScopedResolver(const RanValues& table);
    ~ScopedResolver() override;
    ScopedResolver(const ScopedResolver&) = delete;
    ScopedResolver& operator=(const ScopedResolver&) = delete;
    const ir::NodePtr* Substitute(const ir::Node& node, int index) const override;
    // What to hand Canonicalize: this, or nullptr when nothing has run.
    const ir::ValueResolver* get() const { return locked_ ? this : nullptr; }

   private:
    const RanValues& table_;
    bool locked_;
  };

  // Live entries (sweeps first); for tests.
  size_t size();

 private:
  struct Entry {
    std::weak_ptr<const ir::Node> node;
    std::vector<ir::NodePtr> leaves;
  };
  const Entry* Find(const ir::Node& node) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void SweepLocked(std::vector<Entry>* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SweepDueLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const ir::NodePtr* SubstituteLocked(const ir::Node& node, int index) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<const ir::Node*, Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = 0;
  // One bit per key (FilterBit), set when an entry is made and rebuilt at
  // each sweep: a node whose bit is clear has no entry, and Find answers
  // without probing the map. Canonicalize asks for every edge of a graph, and
  // almost no node has run.
  uint64_t filter_ ABSL_GUARDED_BY(mu_) = 0;
  // entries_.size(), readable without the lock: zero means nothing to resolve.
  std::atomic<size_t> count_{0};
};

// ir::Canonicalize, reading what has run through RanValues::Global().
ir::CanonicalGraph CanonicalizeResolved(const std::vector<ir::Value>& roots,
                                        const std::vector<ir::Value>& ordered = {},
                                        bool size_generic = false);

}  // namespace torch_neuron::lazy

// Content-defined chunking of the op-key stream (DESIGN.md "Adaptive eager").
//
// A group ends after an op when a hash of that op's key and the previous one
// matches a mask, once the group holds at least `min_ops`; it ends at
// `max_ops` regardless. A boundary thus depends on the last two ops only (and
// the minimum), so the same loop body is cut at the same places in every
// iteration whatever ran before it. A sync ends a group from outside (Reset).
// The group's key is an order-sensitive hash of its op keys, built as ops
// arrive: after each op, prefix() is the key of the group so far.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ir/hash.h"

namespace torch_neuron::eager {

struct GroupingOptions {
  size_t min_ops = 16;
  size_t max_ops = 256;
  // A boundary where the pair hash & mask == 0: on average one op in mask + 1
  // past the minimum.
  uint64_t mask = 31;
};

class Grouper {
 public:
  explicit Grouper(GroupingOptions options = {}) : options_(options) {}

  // Adds the next op's key; true if the group ends after it (the caller then
  // reads prefix() as the group's key before the next Add starts a new group).
  bool Add(ir::hash_t op_key);

  // The group so far ends here (a sync, a data-dependent op, a CPU fallback):
  // the next op starts a group with no history.
  void Reset();

  size_t size() const { return size_; }
  uint64_t prefix() const { return prefix_; }
  const GroupingOptions& options() const { return options_; }

 private:
  GroupingOptions options_;
  uint64_t previous_ = 0;  // the last op's folded key
  uint64_t prefix_ = 0;
  size_t size_ = 0;
  bool ended_ = false;  // the last Add ended a group
};

}  // namespace torch_neuron::eager

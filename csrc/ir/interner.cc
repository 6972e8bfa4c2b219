#include "ir/interner.h"

#include <cstdint>

#include "absl/container/inlined_vector.h"

namespace torch_neuron::ir {
namespace {

// The local hash, then each operand's node address and output index, hashed
// in one call (the key lives in this process only: addresses are fine).
hash_t IdentityKey(const Node& node) {
  absl::InlinedVector<uint64_t, 16> words = {absl::Uint128High64(node.local_hash()),
                                             absl::Uint128Low64(node.local_hash())};
  for (const Value& v : node.operands()) {
    words.push_back(reinterpret_cast<uintptr_t>(v.node.get()));
    words.push_back(static_cast<uint64_t>(v.index));
  }
  return HashBytes(words.data(), words.size() * sizeof(uint64_t), 0x696e7465726e);
}

bool SameOperands(const Node& a, const Node& b) {
  if (a.operands().size() != b.operands().size()) return false;
  for (size_t i = 0; i < a.operands().size(); ++i) {
    if (!(a.operands()[i] == b.operands()[i])) return false;
  }
  return true;
}

}  // namespace

NodePtr NodeInterner::Intern(NodePtr node) {
  if (node->kind() != NodeKind::kOp) return node;
  for (const Value& v : node->operands()) {
    if (v.node->kind() == NodeKind::kGenerator) return node;
  }
  const hash_t key = IdentityKey(*node);
  // Declared before the lock: if another thread drops the node's last other
  // owner meanwhile, it is destroyed (freeing device buffers, under the
  // arena's lock) after this lock is released.
  NodePtr existing;
  absl::MutexLock lock(&mu_);
  auto& slot = nodes_[key];
  existing = slot.lock();
  if (existing != nullptr && existing->local_hash() == node->local_hash() && SameOperands(*existing, *node)) {
    return existing;
  }
  slot = node;
  if (nodes_.size() >= purge_at_) {
    absl::erase_if(nodes_, [](const auto& entry) { return entry.second.expired(); });
    purge_at_ = std::max<size_t>(4096, nodes_.size() * 2);
  }
  return node;
}

void NodeInterner::Purge() {
  absl::MutexLock lock(&mu_);
  absl::erase_if(nodes_, [](const auto& entry) { return entry.second.expired(); });
}

size_t NodeInterner::size() const {
  absl::MutexLock lock(&mu_);
  return nodes_.size();
}

}  // namespace torch_neuron::ir

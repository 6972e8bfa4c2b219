#include "ir/graph.h"

#include <algorithm>
#include <memory>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include <c10/util/Exception.h>

namespace torch_neuron::ir {
namespace {

// The size of the last graph canonicalized on this thread: a step's graph is
// usually the size of the one before, so its tables are reserved at once.
thread_local size_t last_graph_nodes = 0;

size_t ReservedNodes() { return last_graph_nodes; }
void NoteGraphSize(size_t nodes) { last_graph_nodes = nodes; }

// The walk's node -> position table: open addressing with linear probing over
// an array each thread keeps from walk to walk. A slot belongs to the current
// walk when it carries the walk's generation, so a new walk starts with no
// clearing. (absl::flat_hash_map cost about 40% of a cached sync's walk: its
// pointer hash, and clearing its control bytes for every graph.)
class PositionTable {
 public:
  // Starts a walk expecting about `nodes` nodes.
  void Begin(size_t nodes) {
    if (++generation_ == 0) {  // after 2^32 walks: forget every old slot
      std::fill(slots_.begin(), slots_.end(), Slot{});
      generation_ = 1;
    }
    size_t capacity = kMinCapacity;
    while (capacity < 2 * nodes) capacity *= 2;
    // Sized for this walk, not for the biggest graph seen: a table left large
    // by a bigger graph spreads the same nodes over more cache lines, and the
    // walk's probes miss (a 1,000-node sync took 0.34 ms instead of 0.20 after
    // one 4,000-node sync). A new size costs one allocation.
    if (slots_.size() != capacity) Reset(capacity);
    size_ = 0;
  }

  // The position stored for `node`, and whether this call put it there (as -1).
  std::pair<int32_t*, bool> FindOrInsert(const Node* node) {
    if (2 * (size_ + 1) > slots_.size()) Grow();
    for (size_t i = Index(node);; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.generation != generation_) {
        slot = Slot{node, generation_, -1};
        ++size_;
        return {&slot.position, true};
      }
      if (slot.node == node) return {&slot.position, false};
    }
  }

  // The position of a node the walk reached.
  int32_t& At(const Node* node) {
    for (size_t i = Index(node);; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      TORCH_INTERNAL_ASSERT(slot.generation == generation_,
                            "Canonicalize: a node the walk reached is not in its table");
      if (slot.node == node) return slot.position;
    }
  }

 private:
  static constexpr size_t kMinCapacity = 1024;
  struct Slot {
    const Node* node = nullptr;
    uint32_t generation = 0;
    int32_t position = 0;
  };

  size_t Index(const Node* node) const {
    // Fibonacci hashing of the address: its high bits, spread by the multiply.
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(node) * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  void Reset(size_t capacity) {
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<int>(__builtin_ctzll(capacity));
  }
  void Grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    const uint32_t generation = generation_;
    Reset(old.size() * 2);
    for (const Slot& slot : old) {
      if (slot.generation != generation) continue;
      size_t i = Index(slot.node);
      while (slots_[i].generation == generation) i = (i + 1) & mask_;
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
  uint32_t generation_ = 0;
};

// This thread's table, or a new one for a walk that starts inside another
// (a resolver that canonicalizes), which must not share it.
class ScopedPositionTable {
 public:
  ScopedPositionTable() {
    if (!in_use_) {
      in_use_ = true;
      table_ = &shared_;
    } else {
      own_ = std::make_unique<PositionTable>();
      table_ = own_.get();
    }
  }
  ~ScopedPositionTable() {
    if (own_ == nullptr) in_use_ = false;
  }
  ScopedPositionTable(const ScopedPositionTable&) = delete;
  ScopedPositionTable& operator=(const ScopedPositionTable&) = delete;
  PositionTable& operator*() { return *table_; }

 private:
  static thread_local PositionTable shared_;
  static thread_local bool in_use_;
  std::unique_ptr<PositionTable> own_;
  PositionTable* table_;
};
thread_local PositionTable ScopedPositionTable::shared_;
thread_local bool ScopedPositionTable::in_use_ = false;

}  // namespace

CanonicalGraph Canonicalize(const std::vector<Value>& given_roots, const std::vector<Value>& ordered,
                            const ValueResolver* resolver, bool size_generic) {
  // A value substituted by the resolver is pinned: the graph then points only
  // at nodes it holds, directly or through the roots. (A second walk, below,
  // meets the same leaves and pins nothing more.)
  std::vector<NodePtr> pinned;
  bool pin = true;
  bool substituted = false;
  auto substitute = [&](const Node& node, int index) -> const NodePtr* {
    if (resolver == nullptr) return nullptr;
    const NodePtr* leaf = resolver->Substitute(node, index);
    if (leaf != nullptr) {
      substituted = true;
      if (pin) pinned.push_back(*leaf);
    }
    return leaf;
  };
  auto resolve = [&](const Value& v) -> Value {
    const NodePtr* leaf = substitute(*v.node, v.index);
    return leaf == nullptr ? v : Value{*leaf, 0};
  };
  std::vector<Value> roots;
  roots.reserve(given_roots.size() + ordered.size());
  for (const Value& v : given_roots) roots.push_back(resolve(v));
  for (const Value& v : ordered) roots.push_back(resolve(v));
  for (const Value& v : roots) pinned.push_back(v.node);

  // Canonical root order: the ordered roots as given, then the others by
  // structural hash, stable for ties.
  auto walk_order = [&](const std::vector<hash_t>& root_hashes) {
    std::vector<size_t> order(given_roots.size());
    std::iota(order.begin(), order.end(), 0);
    if (!size_generic)
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return root_hashes[a] < root_hashes[b]; });
    std::vector<size_t> walk;
    for (size_t j = 0; j < ordered.size(); ++j) walk.push_back(given_roots.size() + j);
    walk.insert(walk.end(), order.begin(), order.end());
    return walk;
  };
  std::vector<hash_t> root_hashes(given_roots.size());
  for (size_t i = 0; i < given_roots.size(); ++i) root_hashes[i] = roots[i].hash();
  std::vector<size_t> walk = walk_order(root_hashes);

  // Iterative post-order DFS (graphs of 10,000+ nodes must not recurse). A
  // node's entry is -1 from when it is first reached until it is done. Each
  // edge is resolved and looked up once, when the walk reaches it: the
  // operands of the nodes on the stack wait in `operands` as (position,
  // output index), each frame's from its `begin`; an operand reached for the
  // first time gets its position when its own frame is done (`slot`).
  ScopedPositionTable scoped_table;
  PositionTable& position = *scoped_table;
  constexpr size_t kNoSlot = ~size_t{0};
  struct Frame {
    const Node* node;
    size_t next_operand;
    size_t begin;
    size_t slot;  // the operand in `operands` waiting for this node's position
  };
  std::vector<Frame> stack;
  std::vector<std::pair<int32_t, int32_t>> operands;
  auto build = [&](const std::vector<size_t>& sequence) {
    CanonicalGraph g;
    position.Begin(ReservedNodes());
    auto visit = [&](const Node* root) {
      if (!position.FindOrInsert(root).second) return;
      stack.push_back({root, 0, operands.size(), kNoSlot});
      while (!stack.empty()) {
        Frame& top = stack.back();
        const auto& ops = top.node->operands();
        if (top.next_operand < ops.size()) {
          const Value& operand = ops[top.next_operand++];
          const NodePtr* leaf = substitute(*operand.node, operand.index);
          const Node* child = leaf == nullptr ? operand.node.get() : leaf->get();
          auto [child_position, reached] = position.FindOrInsert(child);
          operands.emplace_back(*child_position, leaf == nullptr ? operand.index : 0);
          if (reached) stack.push_back({child, 0, operands.size(), operands.size() - 1});
          continue;
        }
        const Frame done = top;
        stack.pop_back();
        const auto index = static_cast<int32_t>(g.nodes.size());
        position.At(done.node) = index;
        g.nodes.push_back(done.node);
        if (done.node->is_parameter()) g.parameters.push_back(index);
        g.AddOperands(absl::MakeConstSpan(operands).subspan(done.begin));
        operands.resize(done.begin);
        if (done.slot != kNoSlot) operands[done.slot].first = index;
      }
    };
    g.operand_list.reserve(ReservedNodes() * 2);
    g.operand_begin.reserve(ReservedNodes() + 1);
    for (size_t i : sequence) visit(roots[i].node.get());
    NoteGraphSize(g.nodes.size());

    absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> output_index;
    g.root_to_output.assign(roots.size(), -1);
    for (size_t i : sequence) {
      std::pair<int32_t, int32_t> out(position.At(roots[i].node.get()), roots[i].index);
      auto [it, inserted] = output_index.try_emplace(out, static_cast<int32_t>(g.outputs.size()));
      if (inserted) g.outputs.push_back(out);
      g.root_to_output[i] = it->second;
    }
    return g;
  };
  CanonicalGraph g = build(walk);

  // A root's node hash covers its operands as traced, and an operand that has
  // run since stands for a leaf: a value traced while the one before it was
  // pending (generate()'s position ids, each the last plus one) carries every
  // earlier step in its hash, so the roots would be ordered differently at
  // every step. Where the resolver substituted, order the roots by the hash of
  // the graph as resolved (one pass over it), and walk again if that order differs.
  if (substituted && given_roots.size() > 1 && !size_generic) {
    std::vector<hash_t> resolved(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      hash_t h = g.nodes[i]->local_hash();
      for (const auto& [p, index] : g.operands(i)) h = HashCombine(h, HashCombine(resolved[p], Hash(index)));
      resolved[i] = h;
    }
    for (size_t i = 0; i < given_roots.size(); ++i) {
      const auto& [p, index] = g.outputs[g.root_to_output[i]];
      root_hashes[i] = HashCombine(resolved[p], Hash(index));
    }
    std::vector<size_t> resolved_walk = walk_order(root_hashes);
    if (resolved_walk != walk) {
      pin = false;
      g = build(resolved_walk);
    }
  }
  g.pinned = std::move(pinned);
  g.size_generic = size_generic;
  g.hash = GraphHash(g);
  return g;
}

hash_t GraphHash(const CanonicalGraph& g) {
  // One XXH3-128 over the canonical form as words: the node count; per node
  // its local hash, operand count and operands (position and output index in
  // one word); the outputs likewise. Every count comes before its items, so
  // no two graphs give the same words. (Folding a hash per node and per
  // operand took nine XXH3 calls a node: most of a cached sync's time.)
  // The words are written through a plain pointer into a buffer sized first:
  // push_back into the thread-local vector fetched its address (a
  // __tls_get_addr call in a shared library) once per word, half the cost.
  thread_local std::vector<uint64_t> buffer;
  std::vector<uint64_t>& words = buffer;
  const size_t count = 2 + g.nodes.size() * 3 + g.operand_list.size() + g.outputs.size();
  if (words.size() < count) words.resize(count);
  auto pair_word = [](int32_t position, int32_t index) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(position)) << 32) | static_cast<uint32_t>(index);
  };
  uint64_t* w = words.data();
  *w++ = g.nodes.size();
  const std::pair<int32_t, int32_t>* operand = g.operand_list.data();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const hash_t local = g.size_generic ? SizeGenericLocalHash(*g.nodes[i]) : g.nodes[i]->local_hash();
    *w++ = absl::Uint128High64(local);
    *w++ = absl::Uint128Low64(local);
    const int32_t n = g.operand_begin[i + 1] - g.operand_begin[i];
    *w++ = static_cast<uint64_t>(n);
    for (int32_t k = 0; k < n; ++k, ++operand) *w++ = pair_word(operand->first, operand->second);
  }
  *w++ = g.outputs.size();
  for (const auto& [p, index] : g.outputs) *w++ = pair_word(p, index);
  return HashTagged(g.size_generic ? kTagSizeGenericGraph : kTagGraph, words.data(),
                    count * sizeof(uint64_t));
}

}  // namespace torch_neuron::ir

#include "compiler/memory_schedule.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <ranges>
#include <span>
#include <tuple>

#include "ir/op_traits.h"

namespace torch_neuron::compiler {
namespace {

constexpr int32_t kNoBuffer = -1;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

bool IsOp(const CompileNode& n) { return !n.dead && n.kind == ir::NodeKind::kOp && !n.folded; }

int64_t ShapeBytes(const ir::Shape& shape) {
  if (shape.dtype() == c10::ScalarType::Undefined) return 0;  // an output the op did not compute
  return std::max<int64_t>(shape.numel(), 0) * static_cast<int64_t>(c10::elementSize(shape.dtype()));
}

// Sorts and dedups `v`.
void Distinct(std::vector<int32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Compressed rows: row r's items are items[begin[r] .. begin[r + 1]). One
// array per relation, not a vector per node: a 15,000-op graph's model was
// mostly its allocations.
struct Rows {
  std::vector<int32_t> begin;
  std::vector<int32_t> items;

  std::span<const int32_t> operator[](size_t r) const {
    return {items.data() + begin[r], static_cast<size_t>(begin[r + 1] - begin[r])};
  }
  size_t size(size_t r) const { return static_cast<size_t>(begin[r + 1] - begin[r]); }

  // Rows 0 .. num_rows - 1 from (row, item) pairs (or (item, row) with
  // `swapped`), each row's items in pair order.
  static Rows FromPairs(size_t num_rows, const std::vector<std::pair<int32_t, int32_t>>& pairs,
                        bool swapped) {
    Rows rows;
    rows.begin.assign(num_rows + 1, 0);
    for (const auto& [a, b] : pairs) ++rows.begin[(swapped ? b : a) + 1];
    for (size_t r = 0; r < num_rows; ++r) rows.begin[r + 1] += rows.begin[r];
    rows.items.resize(pairs.size());
    std::vector<int32_t> next(rows.begin.begin(), rows.begin.end() - 1);
    for (const auto& [a, b] : pairs) rows.items[next[swapped ? b : a]++] = swapped ? a : b;
    return rows;
  }
};

// The graph as the schedule sees it: buffers (an op's output, with the views
// run on it), who reads them, and what each op must wait for.
struct Model {
  std::vector<char> is_op;
  std::vector<int64_t> bytes;       // per buffer
  std::vector<char> pinned;         // per buffer: the graph returns it (or a view of it)
  Rows readers;                     // per buffer: the ops that read it, each once
  Rows reads;                       // per node: the buffers it reads, each once
  Rows users;                       // per node: the ops that read any of its outputs, each once
  std::vector<int32_t> made;        // per node: its first allocated buffer ...
  std::vector<int32_t> makes;       // ... and how many (0: a leaf, or a view run as a view)
  std::vector<int32_t> chain_next;  // per node: the next random op or collective, or -1
  std::vector<int32_t> waits;       // per node: ops it waits for (distinct producers + the chain)
  // Per node: where the graph's order first reads its result (its first user,
  // or the next op of the chain); kNever if nothing does.
  std::vector<int64_t> need;
  int32_t num_ops = 0;

  Model(const CompileGraph& g, const std::vector<bool>& as_view) {
    const size_t size = g.nodes.size();
    is_op.resize(size);
    made.assign(size, 0);
    makes.assign(size, 0);
    chain_next.assign(size, -1);
    waits.assign(size, 0);
    // The buffer of each (node, output), at value_begin[node] + output.
    std::vector<int32_t> value_begin(size + 1, 0);
    for (size_t i = 0; i < size; ++i) {
      const CompileNode& n = g.nodes[i];
      value_begin[i + 1] = value_begin[i] + (n.dead ? 0 : std::max(n.num_outputs(), 1));
    }
    std::vector<int32_t> buffer_of(value_begin[size], kNoBuffer);
    auto buffer = [&](const ValueRef& v) {
      const int32_t count = value_begin[v.node + 1] - value_begin[v.node];
      return count == 0 ? kNoBuffer : buffer_of[value_begin[v.node] + std::min(v.index, count - 1)];
    };
    std::vector<std::pair<int32_t, int32_t>> read_pairs, user_pairs;  // (node, buffer), (producer, user)
    std::vector<int32_t> buffers, producers;
    int32_t last_ordered = -1;
    for (size_t i = 0; i < size; ++i) {
      const CompileNode& n = g.nodes[i];
      const auto node = static_cast<int32_t>(i);
      is_op[i] = IsOp(n);
      if (!is_op[i]) continue;
      ++num_ops;
      buffers.clear();
      producers.clear();
      for (const ValueRef& v : n.operands) {
        if (const int32_t b = buffer(v); b != kNoBuffer) buffers.push_back(b);
        if (is_op[v.node]) producers.push_back(v.node);
      }
      Distinct(buffers);
      Distinct(producers);
      for (int32_t b : buffers) read_pairs.emplace_back(node, b);
      for (int32_t p : producers) user_pairs.emplace_back(p, node);
      waits[i] = static_cast<int32_t>(producers.size());
      if (i < as_view.size() && as_view[i] && !n.operands.empty()) {
        std::fill(buffer_of.begin() + value_begin[i], buffer_of.begin() + value_begin[i + 1],
                  buffer(n.operands[0]));
      } else {
        made[i] = static_cast<int32_t>(bytes.size());
        makes[i] = n.num_outputs();
        for (int32_t k = 0; k < n.num_outputs(); ++k) {
          buffer_of[value_begin[i] + k] = static_cast<int32_t>(bytes.size());
          bytes.push_back(ShapeBytes(n.shape(k)));
        }
      }
      if (g.IsRandom(node) || ir::IsCollectiveOp(n.op)) {
        if (last_ordered >= 0) {
          chain_next[last_ordered] = node;
          ++waits[i];
        }
        last_ordered = node;
      }
    }
    reads = Rows::FromPairs(size, read_pairs, /*swapped=*/false);
    readers = Rows::FromPairs(bytes.size(), read_pairs, /*swapped=*/true);
    users = Rows::FromPairs(size, user_pairs, /*swapped=*/false);
    pinned.assign(bytes.size(), 0);
    for (const ValueRef& v : g.outputs) {
      if (const int32_t b = buffer(v); b != kNoBuffer) pinned[b] = 1;
    }
    need.assign(size, kNever);
    for (size_t i = 0; i < size; ++i) {
      for (int32_t u : users[i]) need[i] = std::min<int64_t>(need[i], u);
      if (chain_next[i] >= 0) need[i] = std::min<int64_t>(need[i], chain_next[i]);
    }
  }

  // The buffers node n allocates.
  auto Made(size_t n) const { return std::views::iota(made[n], made[n] + makes[n]); }
};

// Runs `order` through the model: the peak bytes, or -1 where it is not a
// valid order of the graph.
int64_t Simulate(const CompileGraph& g, const Model& m, const std::vector<int32_t>& order) {
  const size_t size = g.nodes.size();
  std::vector<int32_t> position(size, -1);
  size_t live_nodes = 0;
  for (size_t i = 0; i < size; ++i) live_nodes += g.nodes[i].dead ? 0 : 1;
  if (order.size() != live_nodes) return -1;
  for (size_t p = 0; p < order.size(); ++p) {
    const int32_t n = order[p];
    if (n < 0 || static_cast<size_t>(n) >= size || g.nodes[n].dead || position[n] >= 0) return -1;
    position[n] = static_cast<int32_t>(p);
  }
  for (size_t i = 0; i < size; ++i) {
    if (!m.is_op[i]) continue;
    for (const ValueRef& v : g.nodes[i].operands) {
      if (position[v.node] >= position[i]) return -1;
    }
    if (m.chain_next[i] >= 0 && position[m.chain_next[i]] <= position[i]) return -1;
  }
  std::vector<int32_t> readers_left(m.bytes.size());
  for (size_t b = 0; b < m.bytes.size(); ++b) readers_left[b] = static_cast<int32_t>(m.readers.size(b));
  int64_t live = 0, peak = 0;
  for (int32_t n : order) {
    if (!m.is_op[n]) continue;
    for (int32_t b : m.Made(n)) live += m.bytes[b];
    peak = std::max(peak, live);
    for (int32_t b : m.reads[n]) {
      if (--readers_left[b] == 0 && !m.pinned[b]) live -= m.bytes[b];
    }
    for (int32_t b : m.Made(n)) {
      if (readers_left[b] == 0 && !m.pinned[b]) live -= m.bytes[b];  // nobody reads it
    }
  }
  return peak;
}

std::vector<int32_t> GraphOrder(const CompileGraph& g) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!g.nodes[i].dead) order.push_back(static_cast<int32_t>(i));
  }
  return order;
}

enum class Policy {
  kSoonestNeeded,  // after the ops that free memory: the op the graph's order reads soonest
  kLeastAllocated  // the op whose lasting allocation, less what it frees, is least
};

// A list schedule: each step runs the ready op with the least key.
std::vector<int32_t> Greedy(const CompileGraph& g, const Model& m, Policy policy) {
  const size_t size = g.nodes.size();
  std::vector<int32_t> waits = m.waits;
  std::vector<int32_t> readers_left(m.bytes.size());
  for (size_t b = 0; b < m.bytes.size(); ++b) readers_left[b] = static_cast<int32_t>(m.readers.size(b));
  std::vector<char> done(size, 0);
  std::vector<uint32_t> version(size, 0);
  using Entry = std::tuple<int64_t, int64_t, int32_t, uint32_t>;  // key, key, node, version
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> ready;
  auto push = [&](int32_t n) {
    int64_t net = 0;
    for (int32_t b : m.Made(n)) {
      if (m.readers.size(b) > 0 || m.pinned[b]) net += m.bytes[b];
    }
    for (int32_t b : m.reads[n]) {
      if (readers_left[b] == 1 && !m.pinned[b]) net -= m.bytes[b];
    }
    const uint32_t v = ++version[n];
    if (policy == Policy::kSoonestNeeded) {
      ready.emplace(net > 0 ? 1 : 0, net > 0 ? m.need[n] : n, n, v);
    } else {
      ready.emplace(net, m.need[n], n, v);
    }
  };
  for (size_t i = 0; i < size; ++i) {
    if (m.is_op[i] && waits[i] == 0) push(static_cast<int32_t>(i));
  }
  std::vector<int32_t> order;
  order.reserve(size);
  for (size_t i = 0; i < size; ++i) {
    if (!g.nodes[i].dead && !m.is_op[i]) order.push_back(static_cast<int32_t>(i));
  }
  auto release = [&](int32_t next) {
    if (--waits[next] == 0) push(next);
  };
  while (!ready.empty()) {
    const auto [k1, k2, n, v] = ready.top();
    ready.pop();
    if (done[n] || v != version[n]) continue;
    done[n] = 1;
    order.push_back(n);
    for (int32_t b : m.reads[n]) {
      if (--readers_left[b] != 1) continue;
      // The buffer's last reader now frees it: its key changes.
      for (int32_t r : m.readers[b]) {
        if (!done[r] && waits[r] == 0) push(r);
      }
    }
    for (int32_t u : m.users[n]) release(u);
    if (m.chain_next[n] >= 0) release(m.chain_next[n]);
  }
  return order;
}

}  // namespace

std::vector<int32_t> MemorySchedule(const CompileGraph& g, const std::vector<bool>& as_view) {
  const Model m(g, as_view);
  std::vector<int32_t> best = GraphOrder(g);
  if (m.num_ops < 3) return best;
  int64_t best_peak = Simulate(g, m, best);
  for (Policy policy : {Policy::kSoonestNeeded, Policy::kLeastAllocated}) {
    std::vector<int32_t> order = Greedy(g, m, policy);
    const int64_t peak = Simulate(g, m, order);
    if (peak >= 0 && peak < best_peak) {
      best = std::move(order);
      best_peak = peak;
    }
  }
  return best;
}

int64_t SchedulePeakBytes(const CompileGraph& g, const std::vector<bool>& as_view,
                          const std::vector<int32_t>& order) {
  const Model m(g, as_view);
  return Simulate(g, m, order);
}

}  // namespace torch_neuron::compiler

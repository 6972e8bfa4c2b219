#include "eager/adaptive_scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <memory>
#include <stdexcept>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "base/config.h"
#include "base/metrics.h"
#include "c10/util/Exception.h"
#include "eager/grouper.h"
#include "ir/graph.h"
#include "cache/compile_pool.h"
#include "lazy/executable_cache.h"
#include "lazy/graph_executor.h"
#include "lazy/lazy_tensor.h"
#include "lazy/ran_values.h"
#include "lazy/scheduler.h"
#include "base/profiler.h"

namespace torch_neuron::eager {
namespace {

std::atomic<bool> fail_compiles_for_testing{false};

using Clock = std::chrono::steady_clock;

struct EagerMetrics {
  metrics::Counter* ops = metrics::GetCounter("eager.op.count");
  metrics::Counter* grouped_ops = metrics::GetCounter("eager.op.grouped.count");
  metrics::Counter* groups = metrics::GetCounter("eager.group.count");
  metrics::Counter* compiles = metrics::GetCounter("eager.group.compile.count");
  metrics::Counter* hits = metrics::GetCounter("eager.group.hit.count");
  metrics::Counter* fallbacks = metrics::GetCounter("eager.group.fallback.count");
  metrics::Counter* replays = metrics::GetCounter("eager.group.replay.count");
  metrics::Counter* compile_ns = metrics::GetCounter("eager.background_compile.ns");
};

const EagerMetrics& Counters() {
  static const EagerMetrics* counters = new EagerMetrics();
  return *counters;
}

using lazy::LeafBuffer;

// A group's ops copied over leaves that hold no buffers: what its background
// compile compiles, so compiling keeps no device memory alive and no buffer
// from being donated. Operands that earlier ops of the group computed (read
// through their node while held, through their buffer once run) become those
// ops' copies; other buffers become leaves, one per buffer. Nodes and buffers
// are known by address: the builder holds the original nodes (and through
// them the buffers they read and wrote) until the group ends, so no address
// is reused meanwhile.
class GroupBuilder {
 public:
  // `node` (one op, already run) joins the group. False: an operand is pending
  // work from outside the group, so the group has no graph of its own.
  bool AddRun(const ir::NodePtr& node) {
    if (copies_.contains(node.get())) return true;  // an op traced twice (interned): one node
    originals_.push_back(node);
    std::vector<ir::Value> operands;
    operands.reserve(node->operands().size());
    bool draw = false;
    for (const ir::Value& v : node->operands()) {
      std::optional<ir::Value> mapped = Map(v);
      if (!mapped) return false;
      draw |= v.node->kind() == ir::NodeKind::kGenerator;
      operands.push_back(*std::move(mapped));
    }
    // The group's program names the lines it ran.
    ir::NodePtr copy =
        ir::Node::MakeOp(node->op_name(), std::move(operands), node->args(), node->shapes(), node->source());
    copies_[node.get()] = copy;
    const std::vector<ir::NodePtr> ran = lazy::RanValues::Global().Leaves(*node);
    for (size_t k = 0; k < ran.size(); ++k) {
      const runtime::DeviceDataPtr* buffer = LeafBuffer(*ran[k]);
      if (buffer == nullptr) continue;
      const runtime::DeviceData* data = buffer->get();
      produced_[data] = ir::Value{copy, k};
      candidates_.emplace_back(data, ir::Value{copy, k});
    }
    if (draw) draws_.push_back(copy);
    return true;
  }

  // The group's graph: as roots, the values still held by live tensors (in
  // the order the ops made them); its draws, in trace order, as ordered roots.
  void Finish(const std::vector<const runtime::DeviceData*>& live, std::vector<ir::Value>* roots,
              std::vector<ir::Value>* ordered) const {
    const absl::flat_hash_set<const runtime::DeviceData*> alive(live.begin(), live.end());
    for (const auto& [data, value] : candidates_) {
      if (alive.contains(data)) roots->push_back(value);
    }
    for (const ir::NodePtr& draw : draws_) {
      for (int k = 0; k < draw->num_outputs(); ++k) ordered->push_back(ir::Value{draw, k});
    }
  }

 private:
  std::optional<ir::Value> Map(const ir::Value& v) {
    if (auto it = copies_.find(v.node.get()); it != copies_.end()) return ir::Value{it->second, v.index};
    const ir::Value resolved = lazy::RanValues::Global().Resolve(v);
    const ir::Node& n = *resolved.node;
    switch (n.kind()) {
      case ir::NodeKind::kOp:
        return std::nullopt;
      case ir::NodeKind::kDeviceData: {
        const runtime::DeviceDataPtr* buffer = LeafBuffer(n);
        if (buffer == nullptr) return std::nullopt;
        const runtime::DeviceData* data = buffer->get();
        if (auto it = produced_.find(data); it != produced_.end()) return it->second;
        ir::NodePtr& leaf = leaves_[data];
        if (leaf == nullptr) leaf = ir::Node::MakeDeviceData(n.shape(), nullptr);
        return ir::Value{leaf, 0};
      }
      case ir::NodeKind::kGenerator: {
        ir::NodePtr& leaf = leaves_[resolved.node.get()];
        if (leaf == nullptr) leaf = ir::Node::MakeGenerator(nullptr);
        return ir::Value{leaf, 0};
      }
      default:
        return resolved;  // scalars and constants hold no runtime object
    }
  }

  std::vector<ir::NodePtr> originals_;
  absl::flat_hash_map<const ir::Node*, ir::NodePtr> copies_;
  absl::flat_hash_map<const void*, ir::NodePtr> leaves_;
  absl::flat_hash_map<const runtime::DeviceData*, ir::Value> produced_;
  std::vector<std::pair<const runtime::DeviceData*, ir::Value>> candidates_;
  std::vector<ir::NodePtr> draws_;
};

enum class VariantState { kCompiling, kReady, kFailed };

// What the process knows about groups, shared by devices and compile workers.
class GroupTable {
 public:
  bool IsReadyPrefix(uint64_t prefix) {
    absl::MutexLock lock(&mu_);
    return ready_prefixes_.contains(prefix);
  }
  bool IsReady(uint64_t key) {
    absl::MutexLock lock(&mu_);
    return ready_groups_.contains(key);
  }
  // The state of the variant with cache key `hash`, marked compiling if it had
  // none (then `fresh`).
  VariantState Claim(ir::hash_t hash, bool* fresh) {
    absl::MutexLock lock(&mu_);
    if (variants_.size() > kMaxEntries) Clear();
    auto [it, inserted] = variants_.try_emplace(hash, VariantState::kCompiling);
    *fresh = inserted;
    return it->second;
  }
  void Finish(ir::hash_t hash, bool ok, uint64_t key, const std::vector<uint64_t>& prefixes) {
    absl::MutexLock lock(&mu_);
    variants_[hash] = ok ? VariantState::kReady : VariantState::kFailed;
    if (ok) InsertReady(key, prefixes);
  }
  // Group `key` (with these prefixes) has a compiled variant.
  void MarkReady(uint64_t key, const std::vector<uint64_t>& prefixes) {
    absl::MutexLock lock(&mu_);
    InsertReady(key, prefixes);
  }
  void Reset() {
    absl::MutexLock lock(&mu_);
    Clear();
  }

 private:
  static constexpr size_t kMaxEntries = size_t{1} << 16;
  void InsertReady(uint64_t key, const std::vector<uint64_t>& prefixes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ready_groups_.insert(key);
    ready_prefixes_.insert(prefixes.begin(), prefixes.end());
  }
  void Clear() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    variants_.clear();
    ready_groups_.clear();
    ready_prefixes_.clear();
  }

  absl::Mutex mu_;  // lock order: a leaf, taken under DeviceGroup::mu
  absl::flat_hash_map<ir::hash_t, VariantState> variants_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> ready_groups_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> ready_prefixes_ ABSL_GUARDED_BY(mu_);
};

// Ended groups and finished steps, for tests and the metrics report.
class History {
 public:
  void Group(EndedGroup g) {
    absl::MutexLock lock(&mu_);
    groups_.push_back(g);
    if (groups_.size() > 1024) groups_.pop_front();
  }
  void Step(int64_t ops, int64_t grouped) {
    absl::MutexLock lock(&mu_);
    steps_.emplace_back(ops, grouped);
    if (steps_.size() > 256) steps_.pop_front();
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    groups_.clear();
    steps_.clear();
  }
  std::vector<EndedGroup> Groups() {
    absl::MutexLock lock(&mu_);
    return {groups_.begin(), groups_.end()};
  }
  GroupedShare Share(int steps) {
    absl::MutexLock lock(&mu_);
    GroupedShare share;
    for (auto it = steps_.rbegin(); it != steps_.rend() && share.steps < steps; ++it, ++share.steps) {
      share.ops += it->first;
      share.grouped += it->second;
    }
    return share;
  }

 private:
  absl::Mutex mu_;  // lock order: a leaf, taken under DeviceGroup::mu
  std::deque<EndedGroup> groups_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<int64_t, int64_t>> steps_ ABSL_GUARDED_BY(mu_);
};

History& TheHistory() {
  static auto* history = new History();
  return *history;
}

// The group being traced on one device.
struct DeviceGroup {
  // Lock order: the outermost lock of the process. Held while the group's
  // ops run, compile and launch, so it is taken before GroupTable::mu_,
  // History::mu_ and every lazy/, cache/, compiler/ and runtime/ lock that
  // RunNodes and SyncDevice reach; never taken while holding one of those
  // (the in_scheduler flag keeps a thread from taking it twice). One per
  // device, so no annotation can name it.
  absl::Mutex mu;
  Grouper grouper;
  int ops = 0;           // ops in the group so far
  bool holding = false;  // its ops are held back as pending IR
  std::vector<ir::NodePtr> held;
  std::vector<uint64_t> prefixes;  // the group's key after each of its ops
  GroupBuilder builder;            // the ops that ran
  bool buildable = true;
  int64_t step_ops = 0;
  int64_t step_grouped = 0;

  void Restart() {
    ops = 0;
    holding = false;
    held.clear();
    prefixes.clear();
    builder = GroupBuilder();
    buildable = true;
  }
};

// Set on a thread while the scheduler works: a sync or an op reaching it
// again from inside (a warning handler, say) is handled without it.
thread_local bool in_scheduler = false;

class InScheduler {
 public:
  InScheduler() { in_scheduler = true; }
  ~InScheduler() { in_scheduler = false; }
};

class AdaptiveScheduler : public lazy::Scheduler {
 public:
  void OnOpTraced(int device, ir::hash_t op_key, const std::vector<lazy::LazyTensorPtr>& created,
                  const RunConfig& run) override {
    if (in_scheduler || created.empty()) return lazy::GraphExecutor::Get().RunNow(created);
    InScheduler scope;
    Counters().ops->Add(1);
    DeviceGroup& d = Group(device);
    absl::MutexLock lock(&d.mu);
    ++d.step_ops;
    const ir::NodePtr node = created[0]->pending().node;
    // An op traced again on the same operands whose node already ran (the
    // interner gave the node back): its tensors take the results.
    const bool ran_before = lazy::RanValues::Global().HasRun(*node);
    try {
      const bool ends = d.grouper.Add(op_key);
      const uint64_t prefix = d.grouper.prefix();
      d.prefixes.push_back(prefix);
      if (d.ops == 0) {
        d.holding = !run.launch_blocking && table_.IsReadyPrefix(prefix);
      } else if (d.holding && !table_.IsReadyPrefix(prefix)) {
        RunHeld(device, d);  // no compiled group goes on like this one
      }
      ++d.ops;
      if (ran_before) {
        lazy::GraphExecutor::Get().RunNodes(device, {node}, &created);
      } else if (d.holding) {
        d.held.push_back(node);
      } else {
        lazy::GraphExecutor::Get().RunNodes(device, {node}, &created);
        if (d.buildable) d.buildable = d.builder.AddRun(node);
      }
      if (ends) EndGroup(device, d);
    } catch (...) {
      // The op (or a held one) could not run: its outputs hold the error. The
      // group starts over; nothing is compiled from it.
      d.grouper.Reset();
      d.Restart();
      throw;
    }
  }

  void BeforeSync(int device, bool step_end) override {
    if (in_scheduler) return;
    InScheduler scope;
    DeviceGroup& d = Group(device);
    absl::MutexLock lock(&d.mu);
    d.grouper.Reset();
    try {
      if (d.ops > 0) EndGroup(device, d);
    } catch (...) {
      d.Restart();
      throw;
    }
    if (step_end && d.step_ops > 0) {  // a step of this device
      TheHistory().Step(d.step_ops, d.step_grouped);
      d.step_ops = d.step_grouped = 0;
    }
  }

  void OnCacheCleared() override {
    pool_.WaitIdle();
    table_.Reset();
  }

  void WaitIdle() { pool_.WaitIdle(); }
  void DropQueued() { pool_.DropQueued(); }

 private:
  DeviceGroup& Group(int device) {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "no neuron device ", device);
    std::unique_ptr<DeviceGroup>& slot = groups_[device];
    std::call_once(created_[device], [&] { slot = std::make_unique<DeviceGroup>(); });
    return *slot;
  }

  // The held ops run op by op at once; the group goes on unheld.
  void RunHeld(int device, DeviceGroup& d) {
    Counters().replays->Add(1);
    lazy::GraphExecutor::Get().RunNodes(device, d.held);
    for (const ir::NodePtr& n : d.held) {
      if (d.buildable) d.buildable = d.builder.AddRun(n);
    }
    d.held.clear();
    d.holding = false;
  }

  void EndGroup(int device, DeviceGroup& d) {
    const uint64_t key = d.prefixes.back();
    const int ops = d.ops;
    Counters().groups->Add(1);
    if (d.holding && table_.IsReady(key) && lazy::GraphExecutor::Get().RunPendingIfCached(device)) {
      Counters().hits->Add(1);
      Counters().grouped_ops->Add(ops);
      d.step_grouped += ops;
      TheHistory().Group({key, ops, true});
      d.Restart();
      return;
    }
    if (d.holding) RunHeld(device, d);  // another variant of the group, or one cut short
    if (d.buildable && ops >= 2) Compile(device, d, key);
    TheHistory().Group({key, ops, false});
    d.Restart();
  }

  // A group's graph as its compile job holds it: the canonical graph points
  // into the nodes the roots keep alive.
  struct GroupGraph {
    std::vector<ir::Value> roots;
    std::vector<ir::Value> ordered;
    ir::CanonicalGraph graph;
  };

  // Queues the compile of the group's graph unless it is known.
  void Compile(int device, DeviceGroup& d, uint64_t key) {
    auto group = std::make_shared<GroupGraph>();
    d.builder.Finish(lazy::LiveBuffers(device), &group->roots, &group->ordered);
    if (group->roots.empty() && group->ordered.empty()) return;
    group->graph = ir::Canonicalize(group->roots, group->ordered);
    const cache::CompileSettings settings = lazy::CurrentCompileSettings();
    // Known by cache key: the same graph under other options is another variant.
    const ir::hash_t hash = lazy::ExecutableKey(group->graph, settings);
    bool fresh = false;
    const VariantState state = table_.Claim(hash, &fresh);
    if (!fresh) {
      // Compiled earlier (another device, or before the cache of ready groups
      // was cleared): this group can use it.
      if (state == VariantState::kReady) table_.MarkReady(key, d.prefixes);
      return;
    }
    Counters().compiles->Add(1);
    const bool fail = fail_compiles_for_testing.load(std::memory_order_relaxed);
    pool_.Submit([this, group, hash, key, prefixes = d.prefixes, settings, fail, ops = d.ops] {
      profiler::Scope scope("compile", [&] {
        char name[64];
        std::snprintf(name, sizeof(name), "group %016llx (%d ops)", static_cast<unsigned long long>(key),
                      ops);
        return std::string(name);
      });
      const auto start = Clock::now();
      bool ok = false;
      try {
        if (fail) throw std::runtime_error("group compiles fail for a test");
        // With tiered compilation the group is ready once its tier-0
        // stand-in is built (milliseconds); tier 1 follows in the background.
        ok = lazy::FindOrCompileWith(group->graph, settings).ok();
      } catch (...) {
        ok = false;  // the group runs op by op for good; counted below
      }
      Counters().compile_ns->Add(metrics::NanosSince(start));
      if (!ok) Counters().fallbacks->Add(1);
      table_.Finish(hash, ok, key, prefixes);
    });
  }

  std::unique_ptr<DeviceGroup> groups_[kMaxDevices];
  std::once_flag created_[kMaxDevices];
  GroupTable table_;
  cache::CompilePool pool_{"compile worker"};
};

AdaptiveScheduler& TheScheduler() {
  static auto* scheduler = new AdaptiveScheduler();
  return *scheduler;
}

}  // namespace

void InstallAdaptiveScheduler() { lazy::InstallAdaptiveScheduler(&TheScheduler()); }

void WaitForGroupCompiles() { TheScheduler().WaitIdle(); }

void FailGroupCompilesForTesting(bool fail) {
  fail_compiles_for_testing.store(fail, std::memory_order_relaxed);
}

void DropQueuedGroupCompiles() { TheScheduler().DropQueued(); }

std::vector<EndedGroup> RecentGroups() { return TheHistory().Groups(); }

GroupedShare GroupedShareOfLastSteps(int steps) { return TheHistory().Share(steps); }

void ResetHistory() { TheHistory().Clear(); }

}  // namespace torch_neuron::eager

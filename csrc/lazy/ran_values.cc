#include "lazy/ran_values.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace torch_neuron::lazy {
namespace {

// Below this size every Record sweeps the whole table; above it, sweeps wait
// until the table has doubled (amortized constant cost per Record).
constexpr size_t kSweepEveryTimeBelow = 256;

uint64_t FilterBit(const ir::Node* node) {
  // Nodes are at least 16-byte aligned: the low bits carry nothing.
  const auto bits = reinterpret_cast<uintptr_t>(node) >> 4;
  return uint64_t{1} << ((bits ^ (bits >> 6) ^ (bits >> 12)) & 63);
}

}  // namespace

RanValues& RanValues::Global() {
  static RanValues* table = new RanValues();  // outlives exit-time syncs
  return *table;
}

const RanValues::Entry* RanValues::Find(const ir::Node& node) const {
  if ((filter_ & FilterBit(&node)) == 0) return nullptr;
  auto it = entries_.find(&node);
  if (it == entries_.end() || it->second.node.expired()) return nullptr;  // or a dead node's address
  return &it->second;
}

bool RanValues::SweepDueLocked() const {
  return entries_.size() < kSweepEveryTimeBelow || entries_.size() >= sweep_at_;
}

const ir::NodePtr* RanValues::SubstituteLocked(const ir::Node& node, int index) const {
  const Entry* entry = Find(node);
  return entry == nullptr ? nullptr : &entry->leaves.at(index);
}

void RanValues::SweepLocked(std::vector<Entry>* dead) {
  filter_ = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.node.expired()) {
      dead->push_back(std::move(it->second));
      entries_.erase(it++);
    } else {
      filter_ |= FilterBit(it->first);
      ++it;
    }
  }
  sweep_at_ = std::max(kSweepEveryTimeBelow, entries_.size() * 2);
  count_.store(entries_.size(), std::memory_order_relaxed);
}

void RanValues::Record(const ir::NodePtr& node, std::vector<ir::NodePtr> leaves) {
  // Dead nodes' entries (and the buffers they hold) are destroyed after the
  // lock is released.
  std::vector<Entry> dead;
  absl::MutexLock lock(&mu_);
  if (SweepDueLocked()) SweepLocked(&dead);
  Entry& entry = entries_[node.get()];
  if (!entry.node.expired()) return;
  dead.push_back(std::exchange(entry, Entry{node, std::move(leaves)}));
  filter_ |= FilterBit(node.get());
  count_.store(entries_.size(), std::memory_order_relaxed);
}

void RanValues::Sweep() {
  if (count_.load(std::memory_order_relaxed) == 0) return;
  std::vector<Entry> dead;
  absl::MutexLock lock(&mu_);
  if (SweepDueLocked()) SweepLocked(&dead);
}

bool RanValues::HasRun(const ir::Node& node) const {
  if (count_.load(std::memory_order_relaxed) == 0) return false;
  absl::ReaderMutexLock lock(&mu_);
  return Find(node) != nullptr;
}

std::vector<ir::NodePtr> RanValues::Leaves(const ir::Node& node) const {
  if (count_.load(std::memory_order_relaxed) == 0) return {};
  absl::ReaderMutexLock lock(&mu_);
  const Entry* entry = Find(node);
  return entry == nullptr ? std::vector<ir::NodePtr>{} : entry->leaves;
}

ir::Value RanValues::Resolve(const ir::Value& v) const {
  if (count_.load(std::memory_order_relaxed) == 0) return v;
  absl::ReaderMutexLock lock(&mu_);
  const ir::NodePtr* leaf = SubstituteLocked(*v.node, v.index);
  return leaf == nullptr ? v : ir::Value{*leaf, 0};
}

RanValues::ScopedResolver::ScopedResolver(const RanValues& table)
    : table_(table), locked_(table.count_.load(std::memory_order_relaxed) != 0) {
  if (locked_) table_.mu_.ReaderLock();
}

RanValues::ScopedResolver::~ScopedResolver() {
  if (locked_) table_.mu_.ReaderUnlock();
}

const ir::NodePtr* RanValues::ScopedResolver::Substitute(const ir::Node& node,
                                                         int index) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return table_.SubstituteLocked(node, index);
}

size_t RanValues::size() {
  std::vector<Entry> dead;
  absl::MutexLock lock(&mu_);
  SweepLocked(&dead);
  return entries_.size();
}

ir::CanonicalGraph CanonicalizeResolved(const std::vector<ir::Value>& roots,
                                        const std::vector<ir::Value>& ordered, bool size_generic) {
  RanValues::ScopedResolver resolver(RanValues::Global());
  return ir::Canonicalize(roots, ordered, resolver.get(), size_generic);
}

}  // namespace torch_neuron::lazy

// LruCache: a bounded map from key to shared value, evicting the least recently
// used entry. Values are shared_ptrs: an entry evicted while a caller still holds
// it stays alive for that caller ("in use" entries are never freed under it).
//
// Thread-safe: every member behind mu_.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::cache {

template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(size_t max_entries) : max_entries_(max_entries) {}

  // The value for `key` (and marks it most recently used), or nullptr.
  std::shared_ptr<const Value> Get(const Key& key) {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  // Inserts or replaces; evicts the least recently used entries beyond the bound.
  void Put(const Key& key, std::shared_ptr<const Value> value) {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    while (order_.size() > max_entries_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return order_.size();
  }

  void Clear() {
    absl::MutexLock lock(&mu_);
    index_.clear();
    order_.clear();
  }

 private:
  using Entry = std::pair<Key, std::shared_ptr<const Value>>;
  const size_t max_entries_;
  mutable absl::Mutex mu_;
  std::list<Entry> order_ ABSL_GUARDED_BY(mu_);  // most recent first
  absl::flat_hash_map<Key, typename std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torch_neuron::cache

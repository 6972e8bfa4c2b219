// LruCache: a map from key to shared value bounded by entry count and by bytes
// (each entry's size given at Put), evicting the least recently used entries.
// Values are shared_ptrs: an entry evicted while a caller still holds it stays
// alive for that caller ("in use" entries are never freed under it). Values
// that are dropped (evicted, replaced, cleared) are destroyed after mu_ is
// released, so a value's destructor may take other locks, or use this cache.
//
// Thread-safe: every member behind mu_.
#pragma once

#include <cstddef>
#include <iterator>
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
  // A bound of 0 bytes means no byte bound.
  explicit LruCache(size_t max_entries, size_t max_bytes = 0)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // The value for `key` (and marks it most recently used), or nullptr.
  std::shared_ptr<const Value> Get(const Key& key) {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->value;
  }

  // Inserts or replaces; evicts least recently used entries beyond the bounds
  // (never the one just inserted).
  void Put(const Key& key, std::shared_ptr<const Value> value, size_t bytes = 0) {
    std::list<Entry> dropped;  // destroyed after `lock` (declared later) is released
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      total_bytes_ -= it->second->bytes;
      dropped.push_back(Entry{key, std::move(it->second->value), 0});
      it->second->value = std::move(value);
      it->second->bytes = bytes;
      total_bytes_ += bytes;
      order_.splice(order_.begin(), order_, it->second);
    } else {
      order_.push_front(Entry{key, std::move(value), bytes});
      index_[key] = order_.begin();
      total_bytes_ += bytes;
    }
    while (order_.size() > 1 &&
           (order_.size() > max_entries_ || (max_bytes_ > 0 && total_bytes_ > max_bytes_))) {
      total_bytes_ -= order_.back().bytes;
      index_.erase(order_.back().key);
      dropped.splice(dropped.end(), order_, std::prev(order_.end()));
    }
  }

  size_t bytes() const {
    absl::MutexLock lock(&mu_);
    return total_bytes_;
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return order_.size();
  }

  void Clear() {
    std::list<Entry> dropped;  // destroyed after `lock` is released
    absl::MutexLock lock(&mu_);
    index_.clear();
    dropped.swap(order_);
    total_bytes_ = 0;
  }

 private:
  struct Entry {
    Key key;
    std::shared_ptr<const Value> value;
    size_t bytes;
  };
  const size_t max_entries_;
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  std::list<Entry> order_ ABSL_GUARDED_BY(mu_);  // most recent first
  absl::flat_hash_map<Key, typename std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torch_neuron::cache

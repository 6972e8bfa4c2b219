#include "base/metrics.h"

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::metrics {
namespace {

class Registry {
 public:
  Counter* Get(std::string_view name) {
    absl::MutexLock lock(&mu_);
    auto& slot = counters_[absl::string_view(name.data(), name.size())];
    if (slot == nullptr) slot = std::make_unique<Counter>();
    return slot.get();
  }

  int64_t Value(std::string_view name) {
    absl::MutexLock lock(&mu_);
    auto it = counters_.find(absl::string_view(name.data(), name.size()));
    return it == counters_.end() ? 0 : it->second->Value();
  }

  proto::MetricsSnapshot Snapshot() {
    proto::MetricsSnapshot snapshot;
    snapshot.set_format_version(1);
    absl::MutexLock lock(&mu_);
    for (const auto& [name, counter] : counters_) {
      int64_t v = counter->Value();
      if (v != 0) (*snapshot.mutable_counters())[name] = v;
    }
    return snapshot;
  }

  void Reset() {
    absl::MutexLock lock(&mu_);
    for (auto& [name, counter] : counters_) counter->Reset();
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Counter>> counters_ ABSL_GUARDED_BY(mu_);
};

Registry& GlobalRegistry() {
  // Never destroyed: counters may be bumped by threads still running at exit.
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

Counter* GetCounter(std::string_view name) { return GlobalRegistry().Get(name); }

void Increment(std::string_view name, int64_t delta) { GetCounter(name)->Add(delta); }

int64_t CounterValue(std::string_view name) { return GlobalRegistry().Value(name); }

proto::MetricsSnapshot Snapshot() { return GlobalRegistry().Snapshot(); }

void Reset() { GlobalRegistry().Reset(); }

}  // namespace torch_neuron::metrics

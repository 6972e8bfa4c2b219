#include "lazy/trace_observer.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace torch_neuron::lazy {

namespace internal {
std::atomic<bool> has_trace_observers{false};
}  // namespace internal

namespace {

using ObserverList = std::vector<std::shared_ptr<TraceObserver>>;

// Copy-on-write: tracing threads take a snapshot under a short lock and call
// observers outside it, so an observer may trace (or be removed) without deadlock.
struct Observers {
  absl::Mutex mu;  // lock order: a leaf, after the shape registry's (registry/recorder.cc)
  std::shared_ptr<const ObserverList> list ABSL_GUARDED_BY(mu) = std::make_shared<ObserverList>();
};

Observers& Registered() {
  static auto* observers = new Observers();
  return *observers;
}

thread_local ObservedOpScope* current_scope = nullptr;

}  // namespace

void AddTraceObserver(std::shared_ptr<TraceObserver> observer) {
  TORCH_CHECK(observer != nullptr, "AddTraceObserver: null observer");
  Observers& o = Registered();
  absl::MutexLock lock(&o.mu);
  auto next = std::make_shared<ObserverList>(*o.list);
  next->push_back(std::move(observer));
  o.list = std::move(next);
  internal::has_trace_observers.store(true, std::memory_order_relaxed);
}

void RemoveTraceObserver(const TraceObserver* observer) {
  Observers& o = Registered();
  absl::MutexLock lock(&o.mu);
  auto next = std::make_shared<ObserverList>(*o.list);
  next->erase(std::remove_if(next->begin(), next->end(), [&](const auto& p) { return p.get() == observer; }),
              next->end());
  internal::has_trace_observers.store(!next->empty(), std::memory_order_relaxed);
  o.list = std::move(next);
}

void NotifyTraceObservers(const TracedOp& op) {
  std::shared_ptr<const ObserverList> list;
  {
    Observers& o = Registered();
    absl::MutexLock lock(&o.mu);
    list = o.list;
  }
  for (const auto& observer : *list) {
    try {
      observer->OnTracedOp(op);
    } catch (const std::exception& e) {
      TORCH_WARN_ONCE("a trace observer failed and was ignored: ", e.what());
    }
  }
}

ObservedOpScope::ObservedOpScope() : outer_(current_scope) { current_scope = this; }

ObservedOpScope::~ObservedOpScope() { current_scope = outer_; }

void ObservedOpScope::NoteFallback(const std::string& reason) {
  if (current_scope != nullptr && current_scope->reason_.empty()) {
    current_scope->reason_ = reason.empty() ? "no reason given" : reason;
  }
}

}  // namespace torch_neuron::lazy

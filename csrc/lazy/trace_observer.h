// The TraceObserver seam (DESIGN.md "Seams" 4): code that wants to see every op
// the device is asked to run (the shape registry, a profiler) installs an
// observer; the tracer calls each one once per op it handled, after the op's
// node was emitted (or its factory filled, its identity shared, or the op sent
// to the CPU fallback). With no observer installed the tracer pays one relaxed
// atomic load and a branch per op.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <memory>

namespace torch_neuron::lazy {

// One op as observers see it.
struct TracedOp {
  const c10::OperatorHandle& op;
  const std::string& name;  // "aten::add.Tensor", made once per operator by the tracer
  // The op's arguments as they reached the device (below functionalization:
  // views have become *_copy ops, tensors are plain values), schema order.
  c10::ArrayRef<c10::IValue> args;
  // Non-null when the op ran through the CPU fallback: why it was not traced.
  const char* fallback_reason = nullptr;
};

class TraceObserver {
 public:
  virtual ~TraceObserver() = default;
  // Runs on the tracing thread, possibly on several threads at once. Must not
  // throw: an exception is caught by the tracer, reported once and ignored
  // (an observer never changes what the user's program computes).
  virtual void OnTracedOp(const TracedOp& op) = 0;
};

// Installs and removes observers; either may run while other threads trace.
void AddTraceObserver(std::shared_ptr<TraceObserver> observer);
void RemoveTraceObserver(const TraceObserver* observer);

namespace internal {
extern std::atomic<bool> has_trace_observers;
}  // namespace internal

inline bool HasTraceObservers() { return internal::has_trace_observers.load(std::memory_order_relaxed); }

// Called by the tracer (tracer.cc): every observer, in installation order.
void NotifyTraceObservers(const TracedOp& op);

// The CPU fallback records why the op being observed on this thread did not
// trace; ObservedOpScope collects it. Nested scopes (an op traced while another
// is handled) each see only their own op's fallback.
class ObservedOpScope {
 public:
  ObservedOpScope();
  ~ObservedOpScope();
  ObservedOpScope(const ObservedOpScope&) = delete;
  ObservedOpScope& operator=(const ObservedOpScope&) = delete;
  const char* fallback_reason() const { return reason_.empty() ? nullptr : reason_.c_str(); }
  static void NoteFallback(const std::string& reason);

 private:
  ObservedOpScope* outer_;
  std::string reason_;
};

}  // namespace torch_neuron::lazy

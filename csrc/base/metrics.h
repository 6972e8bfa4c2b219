// The process-wide metrics registry: named monotonic counters that every stage
// bumps (fallback ops, transfers, allocations, later compiles and cache hits).
//
// Thread-safe. Looking a counter up takes a lock; hot paths look it up once and
// keep the Counter*, whose updates are lock-free atomics. Counters live for the
// whole process (pointers stay valid); Reset() zeroes them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "proto/metrics.pb.h"

namespace torch_neuron::metrics {

class Counter {
 public:
  void Add(int64_t delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  // Raises the value to `v` if it is larger (high-water marks).
  void Max(int64_t v) {
    int64_t seen = value_.load(std::memory_order_relaxed);
    while (v > seen && !value_.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
    }
  }
  int64_t Value() const { return value_.load(std::memory_order_relaxed); }
  void Reset() { value_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Returns the counter called `name`, creating it at zero.
Counter* GetCounter(std::string_view name);

// Shorthand for GetCounter(name)->Add(delta).
void Increment(std::string_view name, int64_t delta = 1);

// Value of `name`, 0 if it was never created.
int64_t CounterValue(std::string_view name);

// All counters that are non-zero.
proto::MetricsSnapshot Snapshot();

// Zeroes every counter.
void Reset();

// Nanoseconds since `start` on the steady clock, for the ".ns" counters.
inline int64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
      .count();
}

// Prefix of the per-op CPU-fallback counters ("fallback.aten::add.Tensor").
inline constexpr std::string_view kFallbackPrefix = "fallback.";

}  // namespace torch_neuron::metrics

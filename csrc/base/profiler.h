// The device's profiler (torch_neuron.profiler.trace): timed events of the
// threads that trace, compile and execute, kept while a trace is being taken,
// for a Chrome / Perfetto trace file. A scope is also told to one listener
// installed beside it: torch.profiler's bridge (runtime/torch_profiler.h), so
// the same events appear in its traces. base/ sees no torch: the bridge is
// installed from above.
//
// With neither on, a Scope costs one relaxed atomic load and one call that
// asks the listener whether it listens. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torch_neuron::profiler {

struct Event {
  std::string category;  // "trace", "compile", "execute", "instruction"
  std::string name;
  std::string source;    // the user's line(s), when known
  int64_t start_ns = 0;  // steady clock
  int64_t duration_ns = 0;
  int64_t thread = 0;  // a small id per thread (ThreadNames)
};

namespace internal {
extern std::atomic<bool> active;
}

// Whether a trace is being taken.
inline bool Active() { return internal::active.load(std::memory_order_relaxed); }

// Starts keeping events (dropping any kept); Stop returns them, oldest first.
// Events are bounded (a million); past that they are dropped and counted.
void Start();
std::vector<Event> Stop(int64_t* dropped = nullptr);

// Names the calling thread's track ("neuron:0 queue", "compile worker 1").
// Threads never named show as "thread <id>".
void NameThisThread(std::string name);
std::vector<std::pair<int64_t, std::string>> ThreadNames();

// A second audience of scopes: torch.profiler, through
// runtime/torch_profiler.h. Begin returns what End is given (nullptr: nothing
// recorded for this scope). Called from any thread.
class ScopeListener {
 public:
  virtual ~ScopeListener() = default;
  virtual bool Listening() const = 0;
  virtual void* Begin(const char* category, const std::string& name) = 0;
  virtual void End(void* token) = 0;
};

// Installs `listener` (not owned; it lives as long as the process), replacing
// any installed before.
void SetScopeListener(ScopeListener* listener);

// Whether a trace is being taken or torch.profiler listens on this thread:
// what a Scope checks first.
bool Listening();

// Times the enclosing block as one event. `source` may be given later
// (set_source). Nothing is copied unless someone listens; a name that costs
// something to make is passed as a callable, called only then.
class Scope {
 public:
  Scope(const char* category, std::string_view name, std::string_view source = {});
  template <typename MakeName, typename = decltype(std::string(std::declval<MakeName>()()))>
  Scope(const char* category, MakeName&& make_name, std::string_view source = {}) : Scope(category) {
    if (Listening()) Begin(std::string(make_name()), source);
  }
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  bool recording() const { return start_ns_ >= 0; }
  void set_source(std::string source) { source_ = std::move(source); }

 private:
  explicit Scope(const char* category);  // records nothing (yet)
  void Begin(std::string name, std::string_view source);

  const char* category_;
  std::string name_;
  std::string source_;
  int64_t start_ns_ = -1;
  ScopeListener* listener_ = nullptr;  // the one that began `token_`
  void* token_ = nullptr;
};

}  // namespace torch_neuron::profiler

#include "base/profiler.h"

#include <chrono>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::profiler {

namespace internal {
std::atomic<bool> active{false};
}  // namespace internal

namespace {
std::atomic<ScopeListener*> listener{nullptr};
}  // namespace

void SetScopeListener(ScopeListener* installed) { listener.store(installed, std::memory_order_release); }

namespace {

constexpr size_t kMaxEvents = size_t{1} << 20;

struct Store {
  absl::Mutex mu;
  std::deque<Event> events ABSL_GUARDED_BY(mu);
  int64_t dropped ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::pair<int64_t, std::string>> names ABSL_GUARDED_BY(mu);
};

Store& TheStore() {
  static auto* store = new Store();
  return *store;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t ThisThread() {
  static std::atomic<int64_t> next{1};
  thread_local const int64_t id = next.fetch_add(1);
  return id;
}

}  // namespace

void Start() {
  Store& s = TheStore();
  {
    absl::MutexLock lock(&s.mu);
    s.events.clear();
    s.dropped = 0;
  }
  internal::active.store(true, std::memory_order_relaxed);
}

std::vector<Event> Stop(int64_t* dropped) {
  internal::active.store(false, std::memory_order_relaxed);
  Store& s = TheStore();
  absl::MutexLock lock(&s.mu);
  std::vector<Event> out(std::make_move_iterator(s.events.begin()), std::make_move_iterator(s.events.end()));
  s.events.clear();
  if (dropped != nullptr) *dropped = s.dropped;
  return out;
}

void NameThisThread(std::string name) {
  Store& s = TheStore();
  const int64_t id = ThisThread();
  absl::MutexLock lock(&s.mu);
  for (auto& [thread, existing] : s.names) {
    if (thread == id) {
      existing = std::move(name);
      return;
    }
  }
  s.names.emplace_back(id, std::move(name));
}

std::vector<std::pair<int64_t, std::string>> ThreadNames() {
  Store& s = TheStore();
  absl::MutexLock lock(&s.mu);
  return s.names;
}

bool Listening() {
  if (Active()) return true;
  const ScopeListener* other = listener.load(std::memory_order_acquire);
  return other != nullptr && other->Listening();
}

Scope::Scope(const char* category) : category_(category) {}

Scope::Scope(const char* category, std::string_view name, std::string_view source) : category_(category) {
  if (Listening()) Begin(std::string(name), source);
}

void Scope::Begin(std::string name, std::string_view source) {
  name_ = std::move(name);
  source_ = std::string(source);
  if (Active()) start_ns_ = NowNs();
  ScopeListener* other = listener.load(std::memory_order_acquire);
  if (other != nullptr && other->Listening()) {
    token_ = other->Begin(category_, name_);
    if (token_ != nullptr) listener_ = other;
  }
}

Scope::~Scope() {
  if (token_ != nullptr) listener_->End(token_);  // ends the torch.profiler event
  if (start_ns_ < 0) return;
  Event e{category_, std::move(name_), std::move(source_), start_ns_, NowNs() - start_ns_, ThisThread()};
  Store& s = TheStore();
  absl::MutexLock lock(&s.mu);
  if (s.events.size() >= kMaxEvents) {
    ++s.dropped;
    return;
  }
  s.events.push_back(std::move(e));
}

}  // namespace torch_neuron::profiler

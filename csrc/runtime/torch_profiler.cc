#include "runtime/torch_profiler.h"

#include <ATen/record_function.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/profiler.h"

namespace torch_neuron::runtime {

// The listeners (RecordFunction's thread-local callbacks) and the profiler's
// state they record into (kept in c10's thread-local debug info).
struct TorchListeners {
  at::RecordFunctionTLS tls;
  std::shared_ptr<c10::ThreadLocalDebugInfo> debug_info;
  std::unique_ptr<c10::DebugInfoGuard> guard;  // where they are installed
};

std::shared_ptr<const TorchListeners> CaptureTorchListeners() {
  if (!at::hasThreadLocalCallbacks()) return nullptr;
  auto listeners = std::make_shared<TorchListeners>();
  listeners->tls = at::get_record_function_tls_();
  listeners->debug_info = c10::ThreadLocalDebugInfo::current();
  return listeners;
}

ScopedTorchListeners::ScopedTorchListeners(const std::shared_ptr<const TorchListeners>& listeners) {
  if (listeners == nullptr) return;
  saved_ = std::make_unique<TorchListeners>();
  saved_->tls = at::get_record_function_tls_();
  at::set_record_function_tls_(listeners->tls);
  saved_->guard = std::make_unique<c10::DebugInfoGuard>(listeners->debug_info);
}

ScopedTorchListeners::~ScopedTorchListeners() {
  if (saved_ == nullptr) return;
  saved_->guard.reset();
  at::set_record_function_tls_(saved_->tls);
}

namespace {

// A scope as a RecordFunction: begun when torch.profiler's callbacks are on.
class RecordFunctionListener : public profiler::ScopeListener {
 public:
  bool Listening() const override { return at::hasCallbacks(); }
  void* Begin(const char* category, const std::string& name) override {
    auto record = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (!record->isActive()) return nullptr;
    record->before(absl::StrCat("neuron::", category, " ", name));
    return record.release();
  }
  void End(void* token) override { delete static_cast<at::RecordFunction*>(token); }
};

// Installed when the library loads: scopes are timed from the first one.
const bool bridge_installed = [] {
  profiler::SetScopeListener(new RecordFunctionListener());
  return true;
}();

}  // namespace
}  // namespace torch_neuron::runtime

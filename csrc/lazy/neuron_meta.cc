#include "lazy/neuron_meta.h"

#include <absl/container/flat_hash_map.h>
#include <absl/synchronization/mutex.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "lazy/neuron_inplace.h"
#include "lazy/structured_meta.h"

namespace torch_neuron::lazy {
namespace {

// Keyed by the operator's schema address: an OperatorHandle's operator entry
// lives as long as the dispatcher. Values are heap-allocated and never freed,
// so a reader may call a kernel without holding the lock.
class Kernels {
 public:
  void Set(const c10::OperatorHandle& op, c10::KernelFunction kernel) {
    absl::MutexLock lock(&mu_);
    // A replaced entry is leaked on purpose: another thread may be calling it.
    kernels_[&op.schema()] = new Entry{op.operator_name(), std::move(kernel)};
  }
  const c10::KernelFunction* Find(const c10::OperatorHandle& op) {
    absl::ReaderMutexLock lock(&mu_);
    auto it = kernels_.find(&op.schema());
    return it == kernels_.end() ? nullptr : &it->second->kernel;
  }
  std::vector<std::string> Names() {
    absl::ReaderMutexLock lock(&mu_);
    std::vector<std::string> names;
    for (const auto& [schema, entry] : kernels_) {
      const c10::OperatorName& name = entry->name;
      names.push_back(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  struct Entry {
    c10::OperatorName name;
    c10::KernelFunction kernel;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<const c10::FunctionSchema*, Entry*> kernels_ ABSL_GUARDED_BY(mu_);
};

Kernels& TheKernels() {
  static auto* kernels = new Kernels();
  return *kernels;
}

}  // namespace

void SetNeuronMetaKernel(const c10::OperatorHandle& op, c10::KernelFunction kernel) {
  TheKernels().Set(op, std::move(kernel));
  // An in-place op's checks run where functionalization would run its Meta
  // kernel: its neuron calls need the Functionalize kernel that calls them.
  if (IsInPlaceOp(op)) RegisterNeuronInPlace(op);
}

bool HasNeuronMetaKernel(const c10::OperatorHandle& op) { return TheKernels().Find(op) != nullptr; }

void RunNeuronMeta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (const c10::KernelFunction* kernel = TheKernels().Find(op)) {
    kernel->callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
  } else {
    RunOwnMeta(op, stack);
  }
}

void RunOwnMeta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::DispatchKeySet meta_keys(c10::DispatchKey::Meta);
  if (const c10::KernelFunction* structured = StructuredMetaKernel(op)) {
    // The CPU's own meta function (its checks and messages), where the
    // dispatcher's Meta kernel is a Python one (structured_meta.h).
    structured->callBoxed(op, meta_keys, stack);
  } else {
    op.redispatchBoxed(meta_keys, stack);
  }
}

std::vector<std::string> NeuronMetaKernelOps() { return TheKernels().Names(); }

}  // namespace torch_neuron::lazy

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

namespace {

// Whether a tensor of `stack` has symbolic sizes (the fake tensors of a
// torch.compile trace with dynamic shapes).
bool HasSymbolicTensor(const torch::jit::Stack& stack) {
  auto symbolic = [](const c10::IValue& v) {
    return v.isTensor() && v.toTensor().defined() &&
           v.toTensor().unsafeGetTensorImpl()->has_symbolic_sizes_strides();
  };
  for (const c10::IValue& v : stack) {
    if (symbolic(v)) return true;
    if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (symbolic(e)) return true;
      }
    }
  }
  return false;
}

}  // namespace

void RunNeuronMeta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // Symbolic sizes: PyTorch's own Meta kernel, as a CPU trace gets it. The
  // CPU-parity checks and the C++ meta functions read concrete sizes (ATen's
  // overlap test raises on symbolic ones); the region's trace on real tensors
  // makes them.
  if (HasSymbolicTensor(*stack)) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
    return;
  }
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

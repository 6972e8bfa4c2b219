#include "lazy/functionalized_custom_ops.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "lazy/bridge.h"
#include "lazy/tensor_impl.h"

namespace torch_neuron::lazy {
namespace {

namespace fimpl = at::functionalization::impl;

std::string CustomOpName(const c10::OperatorHandle& op) {
  const std::string& overload = op.schema().overload_name();
  return overload.empty() ? op.schema().name() : op.schema().name() + "." + overload;
}

// A functional wrapper over a traced neuron value: what the user holds. Fake
// tensors of the neuron device (torch.compile's tracing) are not.
bool IsTracedWrapper(const at::Tensor& t) {
  return t.defined() && IsNeuron(t) && fimpl::isFunctionalTensor(t) &&
         dynamic_cast<NeuronTensorImpl*>(fimpl::from_functional_tensor(t).unsafeGetTensorImpl()) != nullptr;
}

template <typename F>
void ForEachTensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList() || v.isOptionalTensorList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) f(e.toTensor());
    }
  }
}

// An argument's state before the kernel: a write into it, or into
// any view of it, queues an update on its storage (a new generation) or
// replaces its value.
struct ReadOnlyArgument {
  size_t index;
  at::Tensor wrapper;
  size_t generation;
  const c10::TensorImpl* value;
};

size_t StorageGeneration(const at::Tensor& wrapper) {
  return static_cast<at::functionalization::FunctionalStorageImpl*>(wrapper.storage().unsafeGetStorageImpl())
      ->generation();
}

ReadOnlyArgument Snapshot(size_t index, const at::Tensor& t) {
  fimpl::sync(t);  // pending writes from before the call are not the kernel's
  return {index, t, StorageGeneration(t),
          fimpl::unsafeGetFunctionalWrapper(t)->value().unsafeGetTensorImpl()};
}

bool Written(const ReadOnlyArgument& a) {
  return StorageGeneration(a.wrapper) != a.generation ||
         fimpl::unsafeGetFunctionalWrapper(a.wrapper)->value().unsafeGetTensorImpl() != a.value;
}

class FunctionalizedCustomOpKernel final : public c10::OperatorKernel {
 public:
  explicit FunctionalizedCustomOpKernel(c10::SafeKernelFunction original) : original_(std::move(original)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const std::vector<c10::Argument>& arguments = op.schema().arguments();
    const size_t base = stack->size() - arguments.size();
    bool traced = false;
    for (size_t i = base; i < stack->size() && !traced; ++i) {
      ForEachTensor((*stack)[i], [&](const at::Tensor& t) { traced |= IsTracedWrapper(t); });
    }
    // The operator's kernel may have been removed since (its library
    // destroyed): then PrivateUse1 is the tracer, which takes values only.
    if (!traced || !(op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                     op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))) {
      original_.callBoxed(op, ks, stack);
      return;
    }
    // Every argument is read-only (RegisterFunctionalizedCustomOp takes no
    // operator that writes one).
    std::vector<ReadOnlyArgument> read_only;
    for (size_t i = 0; i < arguments.size(); ++i) {
      ForEachTensor((*stack)[base + i], [&](const at::Tensor& t) {
        if (IsTracedWrapper(t)) read_only.push_back(Snapshot(i, t));
      });
    }
    // The kernel neuron tensors take (the operator's PrivateUse1 or
    // CompositeExplicitAutograd kernel), on the wrappers: the ops it calls
    // dispatch from the top again, through functionalization.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), stack);
    for (const ReadOnlyArgument& a : read_only) {
      TORCH_CHECK(!Written(a), CustomOpName(op), "'s kernel wrote into its argument '",
                  arguments[a.index].name(), "', which its schema declares read-only (", op.schema(),
                  "); write into a copy of it instead");
    }
  }

 private:
  c10::SafeKernelFunction original_;
};

struct CustomOpState {
  std::mutex mu;
  // Per operator the library holding its registration (one each, so that
  // one can go alone).
  absl::flat_hash_map<std::string, std::unique_ptr<torch::Library>> libraries;
};

CustomOpState& TheCustomOpState() {
  static auto* state = new CustomOpState();
  return *state;
}

}  // namespace

bool RegisterFunctionalizedCustomOp(const c10::OperatorHandle& op) {
  if (op.schema().is_mutable()) return false;
  CustomOpState& s = TheCustomOpState();
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string name = CustomOpName(op);
  if (s.libraries.contains(name)) return true;
  const std::string ns = name.substr(0, name.find("::"));
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::Functionalize,
                                                  __FILE__, __LINE__);
  auto kernel = std::make_unique<FunctionalizedCustomOpKernel>(
      op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize));
  library->impl(name.substr(ns.size() + 2).c_str(),
                torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
  s.libraries.emplace(name, std::move(library));
  return true;
}

void UnregisterFunctionalizedCustomOp(const std::string& name) {
  std::unique_ptr<torch::Library> library;
  {
    CustomOpState& s = TheCustomOpState();
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.libraries.find(name);
    if (it == s.libraries.end()) return;
    library = std::move(it->second);
    s.libraries.erase(it);
  }
  // Destroyed without the lock: deregistration takes the dispatcher's.
}

std::vector<std::string> FunctionalizedCustomOps() {
  CustomOpState& s = TheCustomOpState();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<std::string> names;
  names.reserve(s.libraries.size());
  for (const auto& [name, library] : s.libraries) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace torch_neuron::lazy

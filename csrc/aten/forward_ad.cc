#include "aten/forward_ad.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "lazy/bridge.h"

namespace torch_neuron::aten {
namespace {

c10::SymInt StorageNumel(const at::Tensor& t) { return t.storage().sym_nbytes() / t.itemsize(); }

// Neuron calls answer from the wrappers' storages; every other call runs the
// kernel that was there (functionalization's fallback).
class HasSameStorageNumel final : public c10::OperatorKernel {
 public:
  explicit HasSameStorageNumel(c10::SafeKernelFunction original) : original_(std::move(original)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const at::Tensor& base = (*stack)[stack->size() - 2].toTensor();
    const at::Tensor& other = (*stack)[stack->size() - 1].toTensor();
    if (!lazy::IsNeuron(base) && !lazy::IsNeuron(other)) {
      original_.callBoxed(op, ks, stack);
      return;
    }
    const bool same = StorageNumel(base) == StorageNumel(other);
    torch::jit::drop(*stack, 2);
    stack->emplace_back(same);
  }

 private:
  c10::SafeKernelFunction original_;
};

}  // namespace

void RegisterForwardAdKernels(torch::Library& library) {
  const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_has_same_storage_numel", "");
  library.impl("_has_same_storage_numel",
               torch::CppFunction::makeFromBoxedFunctor(std::make_unique<HasSameStorageNumel>(
                   op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize))));
}

}  // namespace torch_neuron::aten

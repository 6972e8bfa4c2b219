// Between at::Tensor and LazyTensor: unwrapping neuron tensors (functional
// wrappers included) and making at::Tensors for new lazy values.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "lazy/lazy_tensor.h"

namespace torch_neuron::lazy {

bool IsNeuron(const at::Tensor& t);

// The LazyTensor behind a neuron tensor: its own NeuronTensorImpl or, for a
// FunctionalTensorWrapper, the wrapped one after applying pending view updates.
// nullptr for tensors of other devices.
LazyTensorPtr TryGetLazy(const at::Tensor& t);

// As TryGetLazy, raising for a non-neuron tensor.
LazyTensorPtr GetLazy(const at::Tensor& t);

// The NeuronTensorImpl behind `t` (for in-place updates below functionalization).
class NeuronTensorImpl;
NeuronTensorImpl* GetImpl(const at::Tensor& t);

// A tensor for `tensor`, reporting `layout` (strides and storage offset; see
// tensor_impl.h): wrapped for functionalization unless we are already below it
// (the Functionalize key excluded), where the caller wraps.
struct TensorLayout;
at::Tensor MakeTensor(LazyTensorPtr tensor, const TensorLayout& layout);
at::Tensor MakeTensor(LazyTensorPtr tensor);
// As MakeTensor, for a view (or the *_copy form functionalization runs in a
// view's place): never an inference tensor, so that under
// torch.inference_mode() autograd can record a view of a normal tensor (it
// shares the base's version counter; the CPU's views take their base's
// TensorImpl keys). The tensor below a normal wrapper can itself be an
// inference tensor (an in-place op in the mode replaces the wrapper's value
// with a result made in the mode), and functionalization gives no way to tell
// it from the tensor below an inference wrapper; so a view of an inference
// tensor is a normal one here, where the CPU's stays an inference tensor: it
// loses only the CPU's errors for inference tensors (docs/SUPPORT.md).
at::Tensor MakeViewTensor(LazyTensorPtr tensor, const TensorLayout& layout);

// Always wrapped (results that leave through kernels functionalization returns
// as they are, such as _to_copy).
at::Tensor MakeWrappedTensor(LazyTensorPtr tensor, const TensorLayout& layout);
at::Tensor MakeWrappedTensor(LazyTensorPtr tensor);

// Functionalization's lift_fresh (what torch.tensor(data, device=...) ends
// with) returns a view of its argument; for neuron tensors it returns the
// argument itself, as the CPU does, so that such a tensor is a base that
// resize_ and set_ can replace. Registered once, at import; other devices keep
// PyTorch's kernel. Also registers the unboxed functionalization kernels of
// functionalize_fast.h, and, at PythonTLSSnapshot, the kernel that wraps a
// neuron factory's result made under a Python dispatch mode for a caller above
// functionalization (bridge.cc, FactoryUnderMode; any other call: what
// PyTorch's fallback for the key does).
void RegisterFunctionalizeOverrides();

// While alive, swallows this thread's warnings: for registrations that mean to
// replace a kernel ("overriding a previously registered kernel").
class SilenceOverrideWarnings {
 public:
  SilenceOverrideWarnings() : guard_(&silent_) {}

 private:
  class Silent : public c10::WarningHandler {
   public:
    void process(const c10::Warning&) override {}
  };
  Silent silent_;
  c10::WarningUtils::WarningHandlerGuard guard_;
};

}  // namespace torch_neuron::lazy

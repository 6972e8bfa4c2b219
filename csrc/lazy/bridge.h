// Between at::Tensor and LazyTensor: unwrapping neuron tensors (functional
// wrappers included) and making at::Tensors for new lazy values.
#pragma once

#include <ATen/core/Tensor.h>

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

// A tensor for `tensor`: wrapped for functionalization unless we are already
// below it (the Functionalize key excluded), where the caller wraps.
at::Tensor MakeTensor(LazyTensorPtr tensor);

// Always wrapped (results that leave through kernels functionalization returns
// as they are, such as _to_copy).
at::Tensor MakeWrappedTensor(LazyTensorPtr tensor);

}  // namespace torch_neuron::lazy

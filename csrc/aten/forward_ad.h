// Kernels forward-mode AD (torch.autograd.forward_ad, torch.func.jvp) needs
// for neuron tensors.
//
// make_dual and every op that sets a tangent ask whether the tangent already
// has the primal's layout: among the checks, _has_same_storage_numel compares
// the element counts of the two storages. PyTorch's kernel reads
// tensor.storage(), which sits below functionalization, where a neuron tensor
// has no storage and raises ("Cannot access storage of TensorImpl"). The
// functional wrapper above it has one that reports the base's size, as the
// CPU's storage does, so the kernel here answers from the wrappers; calls
// without a neuron tensor run the kernel that was there.
#pragma once

#include <torch/library.h>

namespace torch_neuron::aten {

// Registers the kernels above in `library` (Functionalize, namespace aten).
void RegisterForwardAdKernels(torch::Library& library);

}  // namespace torch_neuron::aten

// In-place ops on neuron tensors under functionalization: the CPU's checks,
// then the op's functional form, for neuron tensors only.
//
// Functionalization turns `x.add_(y)` into `add` plus a write-back, and first
// runs `add_` on meta copies of the arguments (its "meta reference") so that
// the in-place form's errors surface at the call. For neuron that run must be
// neuron's Meta kernel (neuron_meta.h: the CPU's checks, memoized by signature),
// and PyTorch's own run of the op's Meta kernel (a torch._refs function, tens
// of microseconds) must not follow it on every traced in-place op.
//
// PyTorch offers no neuron-owned key above functionalization in every mode
// (AutogradPrivateUse1 is skipped under inference_mode), so this is the one
// place torch_neuron registers on a device-agnostic key: the op's
// Functionalize kernel, which acts only where the written tensor is a neuron
// tensor and otherwise calls exactly the kernel that was there.
//
// Thread-safe: registration takes a lock; the kernels keep no state of their own.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace torch_neuron::lazy {

// Whether `op` writes its first argument (a tensor or a list of tensors) in
// place and nothing else: the ops RegisterNeuronInPlace takes.
bool IsInPlaceOp(const c10::OperatorHandle& op);

// Gives in-place `op` the Functionalize kernel described above (once).
void RegisterNeuronInPlace(const c10::OperatorHandle& op);

// The ops given one, "aten::add_.Tensor" sorted; and those among them whose
// neuron calls run the functional form directly (the others run the original
// kernel after the checks).
std::vector<std::string> NeuronInPlaceOps();
std::vector<std::string> NeuronInPlaceOpsRunFunctional();

}  // namespace torch_neuron::lazy

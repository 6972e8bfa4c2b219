// Direct calls of the view-copy ops (torch.split_with_sizes_copy,
// torch.narrow_copy, aten.view_copy.out...) on neuron tensors.
//
// Functionalization replays every view of a neuron tensor as the view's *_copy
// form, and the tracer gives such a result the view's strides and offset, so
// that x.t().stride() reads as on the CPU. A user's direct *_copy call reaches
// the tracer the same way, so its result would report the view's strides too,
// where the CPU returns a new contiguous tensor (and its out= form, which FSDP2
// uses to unshard parameters, would fail writing into views of a flat buffer).
//
// Each view-copy op gets a Functionalize kernel that, for a call with a neuron
// tensor, spells out what the op means: the view (which functionalization
// replays as before), then a contiguous clone; the out= forms copy that into
// `out`, resized as the CPU's out= convention says. Functionalization's own
// replays call the *_copy ops below this key and are unchanged. Any call
// without a neuron tensor runs exactly the kernel that was there. The kernel
// sits on Functionalize because it is the first key a neuron tensor meets in
// every mode (AutogradPrivateUse1 is skipped under inference_mode).
#pragma once

#include <torch/library.h>

#include <string>
#include <vector>

namespace torch_neuron::aten {

// Registers the kernels above in `library` (Functionalize, namespace aten);
// returns the operators given one ("aten::split_copy.Tensor_out", ...).
std::vector<std::string> RegisterViewCopies(torch::Library& library);

}  // namespace torch_neuron::aten

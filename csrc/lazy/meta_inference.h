// A traced op's output dtypes, shapes and layouts, from its Meta kernel,
// cached by the op's signature.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <memory>
#include <optional>

#include "ir/hash.h"
#include "lazy/cpu_parity_rules.h"

namespace torch_neuron::lazy {

// Runs `op`'s Meta kernel on the stack `build_stack` makes, only on a miss of
// the cache under `key` (making meta tensors is a good part of a traced op's
// cost); nullptr when the op has no Meta kernel or it refuses the inputs.
// `view_of`, for a view's *_copy form, is the view op: its Meta kernel runs
// first, its errors are the user's (view() of a transposed tensor), and its
// strides and offsets are the results' layouts. `fixup` corrects what the Meta
// kernel gets wrong (cpu_parity_rules.h); a corrected shape is laid out contiguously.
// The result is the cache's own (shared, never changed): nullptr when none.
std::shared_ptr<const MetaResult> InferMeta(const c10::OperatorHandle& op, ir::hash_t key,
                                            const std::optional<c10::OperatorHandle>& view_of,
                                            MetaFixup fixup,
                                            const std::function<torch::jit::Stack()>& build_stack);

// Forgets every cached Meta result.
void ClearMetaCache();

}  // namespace torch_neuron::lazy

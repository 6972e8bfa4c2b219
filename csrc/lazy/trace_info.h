// What the tracer knows of an operator: the facts of its schema and of the
// op-traits table (ir/op_traits.h) it needs per call, worked out once per
// operator and thread (tracing is the hot path: no string building or
// matching per op).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/hash.h"
#include "ir/node.h"
#include "ir/op_traits.h"
#include "lazy/cpu_parity_rules.h"

namespace torch_neuron::lazy {

// Factories of constant tensors (zeros, ones, full and their _like/new_ forms)
// are not graph nodes: each call becomes a buffer of its own that the device
// queue fills, a graph input like any device data. A step that creates a
// buffer (an optimizer's first step initialising its moments with zeros) thus
// traces the same graph as the steps that read the buffer back, and one
// compile serves both. Which argument holds the fill value (-1: none).
struct FillFactory {
  bool is_factory = false;
  double constant = 0;  // the value when there is no argument
  int value_arg = -1;
};

struct TraceInfo {
  std::string name;    // "aten::add.Tensor"
  ir::OpName op_name;  // the same, interned for the nodes
  ir::hash_t name_hash = 0;
  const char* never_traced = nullptr;  // why it always takes the CPU fallback
  bool data_dependent = false;         // its output shape depends on its operands' values
  bool index_tensor = false;           // aten::index.Tensor (a boolean mask's count shapes it)
  bool identity = false;
  bool allows_cpu_tensors = false;
  // The CPU's (and CUDA's) kernel is the op's CompositeExplicitAutograd one,
  // which checks its arguments itself on every device but neuron, where the
  // tracer takes its place (block_diag's "input tensors must all be on the
  // same device").
  bool composite_explicit = false;
  // The Meta result depends on Scalar argument values: the output shape
  // (arange(5) vs arange(7)) or whether the Meta kernel refuses them
  // (vector_norm's ord over an empty dim). For every other op it depends only
  // on their types, so values stay out of the Meta cache's key (an optimizer's
  // step size changes every step, and a key per value would run the Meta
  // kernel every step).
  bool scalar_values_key_meta = false;
  MetaFixup meta_fixup = nullptr;
  FillFactory fill;
  // A view op (a return aliases an argument without writing it). Functionalization
  // turns views into *_copy ops, so a view reaching the tracer runs below it.
  bool view = false;
  // An op tagged inplace_view (as_strided_, transpose_, squeeze_): it changes
  // only its first argument's sizes, strides and offset.
  bool inplace_view = false;
  // For a view's *_copy form (slice_copy.Tensor), the view op itself
  // (slice.Tensor): its Meta kernel gives the strides and storage offset the
  // CPU reports for the view, which the copy's (a fresh contiguous tensor) does not.
  std::optional<c10::OperatorHandle> view_of;
  // Its arguments address the first tensor's storage (as_strided's strides
  // and offset): see layouts.h.
  bool addresses_storage = false;
  // Its kernel writes an argument its schema says it reads (hidden_mutations.h).
  bool hidden_mutation = false;
  // A collective (runtime/collectives.h): it runs exactly once, in trace order.
  bool collective = false;
  // aten::_assert_async: traced as neuron::assert_async where the graph must
  // stay one program (tracer.cc), else it takes the CPU fallback.
  bool tensor_assert = false;
  // neuron::assert_async (runtime/device_assert.h): it runs exactly once.
  bool device_assert = false;
  // A read of a range of positions along one dim (slice_copy.Tensor,
  // select_copy.int, narrow_copy), which the tracer sends to the operand of a
  // pending cat that holds the range, or a cat, which takes the operands of
  // the pending cats it concatenates along its dim (concat_pieces.h).
  enum class RangeRead : uint8_t { kNone, kSlice, kSelect, kNarrow, kConcat };
  RangeRead range_read = RangeRead::kNone;
  // Bit i: argument i is a position given as an int that never changes the
  // shape of the result by itself (a slice's start and end, a select's
  // index, arange's bounds): bound as a scalar parameter even when it is 0 or
  // 1 (Python numbers other than those are parameters anyway), so a loop over
  // positions (a static KV cache written and read at the token's position)
  // reuses one graph. Its value is still part of the Meta key (it bounds the
  // result, and the Meta kernel makes the CPU's range checks).
  uint32_t position_args = 0;
  // Bit i: argument i is a SymInt, SymInt? or SymInt[] (a size): positions in
  // a size-generic trace (tracer.h SetSizeGenericTrace). Arguments past 64 are
  // left out (no op with SymInts has that many).
  uint64_t symint_args = 0;
  // Per argument: it may be a stale tensor (see LazyTensor) without error,
  // being a view's base (the view inherits it) or an out= argument (overwritten).
  std::vector<bool> stale_allowed;
  // The arguments the op writes (in-place, out=), and whether each is out=.
  std::vector<std::pair<size_t, bool>> written_args;
};

// The facts of `op`, cached per thread.
const TraceInfo& InfoFor(const c10::OperatorHandle& op);

// Random ops without a Generator argument (rand, randn_like, native_dropout...)
// draw from the CPU's default generator inside their kernels; they must not be
// traced as they are but decomposed into ops that take the device generator.
bool UsesDefaultGeneratorImplicitly(const c10::OperatorHandle& op, const ir::OpTraits& traits);

}  // namespace torch_neuron::lazy

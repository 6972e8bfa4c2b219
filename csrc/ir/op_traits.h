// One table of the per-operator facts the stages need and no schema states:
// which ops never trace, which are identities, which take CPU index tensors,
// which are constant factories, which draw random numbers, which copying view
// ops may run as their views and which readers take any strides. Every stage
// asks here instead of keeping its own list of names.
//
// Keys are full operator names, "aten::slice_copy.Tensor" (name.overload; the
// default overload has no dot). Facts the schema does state (aliasing, out=,
// Generator arguments, return types) are read from the schema by the stage
// that needs them; code attached to ops (Meta fixups, hidden-mutation
// rewrites, collectives) stays with that code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torch_neuron::ir {

enum class FillKind : uint8_t {
  kNone,
  kZeros,  // zeros, zeros_like, new_zeros
  kOnes,   // ones, ones_like, new_ones
  kFull,   // full, full_like, new_full: the value is the fill_value argument
};

struct OpTraits {
  // Its output's shape depends on its input's values (nonzero, unique,
  // masked_select...): never traced, it runs on the CPU.
  bool data_dependent = false;
  // Returns and writes nothing and checks only its arguments' metadata
  // (_assert_tensor_metadata), which tracing knows: it need not read values.
  // Every other op that returns and writes nothing runs to check its inputs'
  // values (_assert_async, _linalg_check_errors) and takes the CPU fallback.
  bool checks_metadata_only = false;
  // A check of a tensor's value (_assert_async): where the graph must stay one
  // program it is traced as a check the program makes (runtime/device_assert.h).
  bool tensor_assert = false;
  // Its result is its first argument's value (detach, alias, clone).
  bool identity = false;
  // May take CPU tensors beside neuron ones: index tensors (index,
  // index_put), and CTC's length tensors, which CUDA's kernels read from the
  // CPU and users pass so.
  bool cpu_index_tensors = false;
  // A factory of a constant tensor: a device fill, not a graph node.
  FillKind fill = FillKind::kNone;
  // Its name says it draws random numbers (rand, normal, dropout...). Whether
  // it draws from a Generator argument or the default generator is the
  // schema's to say.
  bool random = false;
  // Its output's shape depends on scalar argument values (arange(5) vs
  // arange(7)); for other ops, only on the arguments' types.
  bool shape_from_scalar_values = false;
  // Its Meta kernel checks scalar argument values (linalg_vector_norm refuses
  // a negative or infinite ord over an empty dim, renorm a non-positive p or a
  // negative maxnorm): a Meta result cached for one value must not answer for
  // another.
  bool meta_checks_scalar_values = false;
  // Its arguments address its first tensor's storage (as_strided's strides
  // and offset).
  bool addresses_storage = false;
  // A copying view op (functionalization's t_copy, slice_copy.Tensor...) that
  // a program may run as this view instead (t, slice.Tensor): the same values,
  // no copy. Empty when it has none.
  std::string_view view_form;
  // A view op whose kernel demands strides it can view (view, _unsafe_view). A
  // program's value may hold other strides than the traced tensor did: a view
  // traced below functionalization (a composite such as einsum under
  // inference_mode) runs as that view, and an identity shortcut (a clone to a
  // contiguous layout) shares its value. Programs run such an op as reshape,
  // which is the same op wherever the view would succeed, and copies where it
  // would fail.
  bool runs_as_reshape = false;
  // Takes any strides and storage offset, so a view may feed it in place of a
  // copy: generated kernels, BLAS calls, TensorIterator elementwise ops and
  // reductions.
  bool stride_agnostic = false;

  // What the CPU's kernels check that PyTorch's Meta kernels may not
  // (lazy/cpu_parity.h). Keyed by the operator name alone: every overload.
  //
  // An in-place op the CPU lets write into a tensor whose elements share
  // memory: fills (every element gets the same value) and ops that copy
  // their input before writing.
  bool writes_overlapping_memory = false;
  // An in-place op that writes metadata or sparse storage, not elements
  // (requires_grad_, _resize_output_, sparse_resize_...), beside those with
  // the inplace_view tag: no element rule applies.
  bool writes_metadata_only = false;
  // An elementwise in-place op without the pointwise tag (the comparisons,
  // __iand__, gcd_, copysign_...): the CPU checks that its operands broadcast
  // to self's shape and that its result's dtype casts to self's, as a
  // pointwise op's.
  bool elementwise_untagged = false;
  // Promotes, then refuses an unsafe cast, before its own dtype checks (the
  // in-place shifts): the result dtype is the promotion of its operands.
  bool casts_before_own_checks = false;
  // A random in-place op whose CPU kernel checks its parameters (from < to,
  // std >= 0, p in [0, 1]) where its Meta kernel does not: probed on the CPU.
  bool probes_random_parameters = false;
  // Its CPU kernel refuses dtype or alpha combinations that its Meta kernel
  // accepts (bool subtraction, a float alpha of an integral add, complex of
  // mixed dtypes, searchsorted's sides and outs, celu's alpha of 0): probed on
  // the CPU.
  bool probes_on_cpu = false;
  // Those refusals depend on the arguments' kinds alone (dtypes, ranks, the
  // kinds of numbers), not on numbers' values.
  bool probe_by_kinds = false;
};

// The facts of `op` (all false for an op the table does not name). Cached;
// the reference stays valid for the process.
const OpTraits& TraitsOf(std::string_view op);

// Every copying view op with its view form (for tests: each pair names two
// real operators taking the same arguments).
const std::vector<std::pair<std::string_view, std::string_view>>& ViewForms();

// The neuron:: collective ops (schemas in aten/registration.cc, host kernels
// in runtime/collectives.cc): they have effects beyond their result, so the
// tracer runs each once and in trace order and the compiler never folds or
// reorders one.
bool IsCollectiveOp(std::string_view op);

}  // namespace torch_neuron::ir

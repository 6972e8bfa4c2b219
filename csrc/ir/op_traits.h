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
  // Its arguments address its first tensor's storage (as_strided's strides
  // and offset).
  bool addresses_storage = false;
  // A copying view op (functionalization's t_copy, slice_copy.Tensor...) that
  // a program may run as this view instead (t, slice.Tensor): the same values,
  // no copy. Empty when it has none.
  std::string_view view_form;
  // Takes any strides and storage offset, so a view may feed it in place of a
  // copy: generated kernels, BLAS calls, TensorIterator elementwise ops and
  // reductions.
  bool stride_agnostic = false;
};

// The facts of `op` (all false for an op the table does not name). Cached;
// the reference stays valid for the process.
const OpTraits& TraitsOf(std::string_view op);

// Every copying view op with its view form (for tests: each pair names two
// real operators taking the same arguments).
const std::vector<std::pair<std::string_view, std::string_view>>& ViewForms();

}  // namespace torch_neuron::ir

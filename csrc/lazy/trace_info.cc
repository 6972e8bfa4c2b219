#include "lazy/trace_info.h"

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "lazy/cpu_fallback.h"
#include "lazy/hidden_mutations.h"
#include "ir/op_schema.h"
#include "ir/op_traits.h"
#include "runtime/device_assert.h"

namespace torch_neuron::lazy {
namespace {

using ir::IsGeneratorType;
using ir::IsListOf;
using ir::IsTensorType;

FillFactory FillFactoryFor(const c10::FunctionSchema& schema, const ir::OpTraits& traits) {
  FillFactory f;
  switch (traits.fill) {
    case ir::FillKind::kNone:
      break;
    case ir::FillKind::kZeros:
      f.is_factory = true;
      break;
    case ir::FillKind::kOnes:
      f.is_factory = true, f.constant = 1;
      break;
    case ir::FillKind::kFull:
      if (std::optional<int> index = schema.argumentIndexWithName("fill_value")) {
        f.is_factory = true, f.value_arg = *index;
      }
      break;
  }
  return f;
}

// The view op whose *_copy form `schema` is (aten::slice.Tensor for
// aten::slice_copy.Tensor), if any.
std::optional<c10::OperatorHandle> ViewOpOf(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  if (!absl::EndsWith(name, "_copy") || ir::TraitsOf(name).identity || name == "aten::_to_copy") {
    return std::nullopt;
  }
  std::optional<c10::OperatorHandle> view = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(name.substr(0, name.size() - 5), schema.overload_name()));
  if (!view || !view->hasSchema()) return std::nullopt;
  for (const c10::Argument& ret : view->schema().returns()) {
    if (ret.alias_info() == nullptr || ret.alias_info()->isWrite()) return std::nullopt;
  }
  if (view->schema().arguments().size() != schema.arguments().size()) return std::nullopt;
  return view;
}

}  // namespace

bool UsesDefaultGeneratorImplicitly(const c10::OperatorHandle& op, const ir::OpTraits& traits) {
  if (!traits.random) return false;
  for (const c10::Argument& arg : op.schema().arguments()) {
    if (IsGeneratorType(arg.type())) return false;
  }
  return true;
}

namespace {

// SymInt, SymInt? or SymInt[] (a schema's sizes; plain int arguments are
// never sizes Dynamo can make symbolic).
bool IsSymIntType(const c10::TypePtr& type) {
  const c10::TypePtr t = ir::Unwrapped(type);
  if (t->kind() == c10::TypeKind::SymIntType) return true;
  auto list = t->cast<c10::ListType>();
  return list != nullptr && ir::Unwrapped(list->getElementType())->kind() == c10::TypeKind::SymIntType;
}

// The position arguments of an op (TraceInfo::position_args): functionalization's
// copies of the views that read positions, the scatters that write through
// them (an update of a static cache at the token's position), arange's bounds.
uint32_t PositionArgs(const std::string& name) {
  static const auto* table = new absl::flat_hash_map<std::string, uint32_t>{
      {"aten::slice_copy.Tensor", 1u << 2 | 1u << 3},  // (self, dim, start, end, step)
      {"aten::select_copy.int", 1u << 2},              // (self, dim, index)
      {"aten::narrow_copy", 1u << 2},                  // (self, dim, start, length)
      {"aten::slice_scatter", 1u << 3 | 1u << 4},      // (self, src, dim, start, end, step)
      {"aten::select_scatter", 1u << 3},               // (self, src, dim, index)
      // Integer bounds of arange (torch.arange(past, past + 1), transformers'
      // cache_position): Scalars, parameters already but for 0 and 1.
      {"aten::arange.start", 1u << 0 | 1u << 1},       // (start, end, ...)
      {"aten::arange.start_step", 1u << 0 | 1u << 1},  // (start, end, step, ...)
  };
  auto it = table->find(name);
  return it == table->end() ? 0 : it->second;
}

}  // namespace

const TraceInfo& InfoFor(const c10::OperatorHandle& op) {
  thread_local absl::flat_hash_map<const c10::FunctionSchema*, std::unique_ptr<TraceInfo>> infos;
  const c10::FunctionSchema& schema = op.schema();
  std::unique_ptr<TraceInfo>& slot = infos[&schema];
  if (slot == nullptr) {
    slot = std::make_unique<TraceInfo>();
    slot->name = OpName(op);
    // Autograd's efficient zero tensors are plain zeros here (same arguments):
    // the CPU kernel makes a storage-less ZeroTensor nothing downstream can read.
    if (slot->name == "aten::_efficientzerotensor") slot->name = "aten::zeros";
    slot->op_name = ir::OpName(slot->name);
    slot->name_hash = ir::Hash(slot->name);
    for (const c10::Argument& ret : schema.returns()) {
      if (!IsTensorType(ret.type()) && !IsListOf(ret.type(), c10::TypeKind::TensorType)) {
        slot->never_traced = "it returns a value that is not a tensor";
      }
    }
    const ir::OpTraits& traits = ir::TraitsOf(slot->name);
    if (traits.data_dependent) slot->never_traced = "its output shape depends on the data";
    slot->data_dependent = traits.data_dependent;
    slot->index_tensor = slot->name == "aten::index.Tensor";
    slot->identity = traits.identity;
    slot->allows_cpu_tensors = traits.cpu_index_tensors;
    slot->composite_explicit = op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
                               !op.hasKernelForDispatchKey(c10::DispatchKey::CPU);
    // Scalar values key the Meta cache where they shape the result or a check
    // depends on them: the Meta kernel's own (vector_norm's ord) or a CPU probe
    // of neuron's Meta kernel that keys by value (celu's alpha; cpu_parity.h).
    slot->scalar_values_key_meta = traits.shape_from_scalar_values || traits.meta_checks_scalar_values ||
                                   (traits.probes_on_cpu && !traits.probe_by_kinds) ||
                                   traits.probes_random_parameters;
    // A collective's world size and split sizes shape its result.
    slot->collective = ir::IsCollectiveOp(slot->name);
    slot->scalar_values_key_meta |= slot->collective;
    slot->tensor_assert = traits.tensor_assert;
    slot->device_assert = slot->name == runtime::kDeviceAssertOp;
    slot->meta_fixup = MetaFixupFor(slot->name);
    slot->fill = FillFactoryFor(schema, traits);
    for (const c10::Argument& ret : schema.returns()) {
      if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) slot->view = true;
    }
    slot->view_of = ViewOpOf(schema);
    slot->inplace_view = op.hasTag(at::Tag::inplace_view);
    slot->addresses_storage = traits.addresses_storage;
    slot->hidden_mutation = HasHiddenMutation(slot->name);
    slot->position_args = PositionArgs(slot->name);
    for (size_t i = 0; i < schema.arguments().size() && i < 64; ++i) {
      if (IsSymIntType(schema.arguments()[i].real_type())) slot->symint_args |= uint64_t{1} << i;
    }
    if (slot->name == "aten::slice_copy.Tensor") slot->range_read = TraceInfo::RangeRead::kSlice;
    if (slot->name == "aten::select_copy.int") slot->range_read = TraceInfo::RangeRead::kSelect;
    if (slot->name == "aten::narrow_copy") slot->range_read = TraceInfo::RangeRead::kNarrow;
    if (slot->name == "aten::cat") slot->range_read = TraceInfo::RangeRead::kConcat;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::Argument& arg = schema.arguments()[i];
      slot->stale_allowed.push_back((slot->view && i == 0) || arg.is_out());
      if (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) {
        slot->written_args.emplace_back(i, arg.is_out());
      }
    }
    // An op that returns nothing and writes nothing runs only to check its
    // inputs' values (_assert_async, _linalg_check_errors under linalg.inv,
    // solve, cholesky): traced, nothing would read it and the check would
    // vanish. The fallback reads the values and raises as the CPU does.
    if (schema.returns().empty() && slot->written_args.empty() && !traits.checks_metadata_only) {
      slot->never_traced = "it only checks its inputs' values";
    }
  }
  return *slot;
}

}  // namespace torch_neuron::lazy

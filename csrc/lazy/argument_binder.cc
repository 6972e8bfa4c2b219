#include "lazy/argument_binder.h"

#include <algorithm>

#include "absl/base/optimization.h"
#include "base/config.h"
#include "ir/op_schema.h"
#include "lazy/bridge.h"
#include "lazy/execution_mode.h"
#include "lazy/map_tensors.h"
#include "runtime/device_data.h"
#include "runtime/dtype_checks.h"
#include "runtime/generator.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {

using ir::IsGeneratorType;
using ir::IsListOf;
using ir::IsNumberType;
using ir::Unwrapped;

// The operand index of `t`, or nullopt for an undefined tensor.
std::optional<int32_t> ArgumentBinder::TensorOperand(const at::Tensor& t) {
  if (!t.defined()) return std::nullopt;
  const TraceInfo& info = c_.info;
  ir::Value value;
  at::Tensor meta;  // undefined: made later from `deferred_`
  auto defer = [&](const ir::Value& operand, TensorLayout layout) {
    deferred_.push_back({in_list_ ? list_position_ : meta_stack_.size(),
                         in_list_ ? static_cast<int>(meta_stack_.size()) : -1, &operand.shape(),
                         std::move(layout)});
  };
  if (LazyTensorPtr lazy = TryGetLazy(t)) {
    if (!exempt_from_stale_check_) lazy->CheckNoLostWrite();
    value = lazy->GetValue();
    TensorLayout layout = TensorLayout::Of(t);
    signature_.Tensor(value.node->shape_hash(value.index), layout);
    defer(value, std::move(layout));
  } else if (t.device().is_cpu() && t.dim() == 0) {
    const bool wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
    const c10::Scalar item = t.item();
    value = ir::Value{ir::Node::MakeScalar(item, t.scalar_type(), wrapped), 0};
    // A CPU scalar tensor in a region's graph is a constant of the graph.
    if (ABSL_PREDICT_FALSE(origins_ != nullptr)) origins_->Note(value.node, SizeOrigins::kLiteral);
    meta = t;
    // A Python number's value never shapes the result; another CPU scalar
    // tensor's might (the Meta kernel sees its data).
    ir::hash_t value_hash = 0;
    if (!wrapped || info.scalar_values_key_meta) ir::HashIValue(c10::IValue(item), &value_hash);
    signature_.CpuScalar(t.scalar_type(), wrapped, value_hash);
  } else if (t.device().is_cpu() && info.allows_cpu_tensors) {
    auto data = runtime::ValueOrThrow(runtime::DeviceData::FromHost(device_, t));
    value = LazyTensor::FromData(data)->GetValue();
    defer(value, TensorLayout{});
    signature_.Tensor(value.node->shape_hash(value.index), TensorLayout{});
  } else {
    TORCH_CHECK(false,
                "Expected all tensors to be on the same device, but found at least two "
                "devices, neuron:",
                device_, " and ", t.device(), "! (in ", info.name,
                "; move the tensor with .to('neuron') first)");
  }
  operands_.push_back(std::move(value));
  meta_stack_.push_back(meta);
  return static_cast<int32_t>(operands_.size() - 1);
}

void ArgumentBinder::NoteOrigin(const ir::NodePtr& leaf, size_t element) {
  origins_->Note(leaf, origins_taken_ ? origins_->OriginOf(arg_index_, element) : SizeOrigins::kUnknown);
}

int32_t ArgumentBinder::ScalarOperand(const c10::Scalar& s, size_t element) {
  operands_.push_back(ir::Value{ir::Node::MakeScalar(s, ScalarDtype(s)), 0});
  if (ABSL_PREDICT_FALSE(origins_ != nullptr)) NoteOrigin(operands_.back().node, element);
  // The value is never part of the node's hash (it is a parameter), and part
  // of the Meta signature only where it shapes the result (arange) or the
  // Meta kernel checks it (vector_norm's ord).
  ir::hash_t value_hash = 0;
  if (c_.info.scalar_values_key_meta) ir::HashIValue(c10::IValue(s), &value_hash);
  signature_.Scalar(ScalarDtype(s), value_hash);
  return static_cast<int32_t>(operands_.size() - 1);
}

// A position (TraceInfo::position_args): a parameter whatever its value,
// which keys the Meta cache (it bounds the result).
int32_t ArgumentBinder::PositionOperand(int64_t position, size_t element) {
  operands_.push_back(ir::Value{ir::Node::MakePosition(position), 0});
  if (ABSL_PREDICT_FALSE(origins_ != nullptr)) NoteOrigin(operands_.back().node, element);
  signature_.Tagged(OpSignature::kAttr).Word(static_cast<uint64_t>(position));
  return static_cast<int32_t>(operands_.size() - 1);
}

void ArgumentBinder::BindTensorList(const c10::TypePtr& type, const c10::IValue& v) {
  std::vector<int32_t> indices;
  torch::jit::Stack saved_meta;
  saved_meta.swap(meta_stack_);
  list_position_ = saved_meta.size();
  in_list_ = true;
  for (const c10::IValue& e : v.toListRef()) {
    std::optional<int32_t> index = e.isTensor() ? TensorOperand(e.toTensor()) : std::nullopt;
    indices.push_back(index.value_or(-1));
    if (!index) meta_stack_.push_back(c10::IValue());
  }
  const bool optional_list = Unwrapped(type->castRaw<c10::ListType>()->getElementType()) !=
                             type->castRaw<c10::ListType>()->getElementType();
  c10::IValue meta_list;
  if (optional_list) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& m : meta_stack_) {
      // A deferred slot holds an undefined tensor until it is made.
      list.push_back(m.isTensor() ? std::optional<at::Tensor>(m.toTensor()) : std::nullopt);
    }
    meta_list = list;
  } else {
    std::vector<at::Tensor> list;
    for (const c10::IValue& m : meta_stack_) list.push_back(m.toTensor());
    meta_list = list;
  }
  meta_stack_.swap(saved_meta);
  in_list_ = false;
  meta_stack_.push_back(meta_list);
  signature_.Tagged(OpSignature::kList).Word(indices.size());
  for (int32_t index : indices) signature_.Word(static_cast<uint64_t>(index));
  args_.push_back(ir::Arg::OperandList(std::move(indices)));
}

void ArgumentBinder::FindSizesFromData() {
  auto look = [this](const at::Tensor& t) {
    LazyTensorPtr lazy = t.defined() ? TryGetLazy(t) : nullptr;
    if (lazy == nullptr) return;
    size_from_data_ |= lazy->size_from_data();
    tensor_args_.push_back(lazy.get());
  };
  for (size_t i = 0; i < c_.num_args; ++i) ForEachTensor(c_.arg(i), look);
}

void ArgumentBinder::MarkResultsSizeFromData(const std::vector<LazyTensorPtr>& results) const {
  for (const LazyTensorPtr& t : results) {
    if (std::find(tensor_args_.begin(), tensor_args_.end(), t.get()) == tensor_args_.end())
      t->MarkSizeFromData();
  }
}

std::optional<std::string> ArgumentBinder::Bind() {
  const TraceInfo& info = c_.info;
  const std::string& name = info.name;
  // An operand whose sizes came from data (a router's picked tokens) makes
  // the op's sizes run-time values in lazy mode (LazyTensor::size_from_data).
  if (ABSL_PREDICT_FALSE(SizesFromDataSeen()) && CurrentMode() == ExecutionMode::kLazy) FindSizesFromData();
  // Bit i: argument i is bound as a position (a parameter whatever its value).
  // SymInts too in a size-generic trace: a region's (dynamo/compiled_graph.h),
  // every lazy trace with TORCH_NEURON_DYNAMIC_SHAPES, and a lazy op that
  // reads a tensor whose sizes came from data.
  const bool generic =
      ABSL_PREDICT_FALSE(size_generic_trace_) ||
      (ABSL_PREDICT_FALSE(c_.trace.dynamic_shapes) && CurrentMode() == ExecutionMode::kLazy) ||
      ABSL_PREDICT_FALSE(size_from_data_);
  const uint64_t positions = info.position_args | (generic ? info.symint_args : 0);
  auto is_position = [&](size_t i) { return i < 64 && (positions >> i & 1) != 0; };
  origins_ = CurrentSizeOrigins();
  if (ABSL_PREDICT_FALSE(origins_ != nullptr)) origins_taken_ = origins_->Take(name);
  for (size_t i = 0; i < c_.num_args; ++i) {
    const c10::IValue& v = c_.arg(i);
    arg_index_ = i;
    // real_type(): a ScalarType, Layout or MemoryFormat argument's type() is int.
    const c10::TypePtr& type = c_.schema.arguments()[i].real_type();
    exempt_from_stale_check_ = info.stale_allowed[i];
    if (v.isTensor()) {
      std::optional<int32_t> index = TensorOperand(v.toTensor());
      if (index) {
        args_.push_back(ir::Arg::Operand(*index));
      } else {
        args_.push_back(ir::Arg::Attr(c10::IValue()));
        meta_stack_.push_back(c10::IValue());
        // Keyed, so that (None, t) and (t, None) differ.
        signature_.Tagged(OpSignature::kUndefined);
      }
    } else if (IsListOf(type, c10::TypeKind::TensorType) && v.isList()) {
      BindTensorList(type, v);
    } else if (IsNumberType(type) && !v.isNone()) {
      const c10::Scalar s = v.toScalar();
      if (s.isComplex()) return "it takes a complex scalar";
      const bool position = ABSL_PREDICT_FALSE(is_position(i)) && s.isIntegral(false);
      args_.push_back(ir::Arg::Operand(position ? PositionOperand(s.toLong()) : ScalarOperand(s)));
      meta_stack_.push_back(v);
    } else if (IsListOf(type, c10::TypeKind::NumberType) && v.isList()) {
      std::vector<int32_t> indices;
      for (const c10::IValue& e : v.toListRef())
        indices.push_back(ScalarOperand(e.toScalar(), indices.size()));
      args_.push_back(ir::Arg::OperandList(std::move(indices)));
      meta_stack_.push_back(v);
    } else if (ABSL_PREDICT_FALSE(is_position(i)) && v.isInt()) {
      args_.push_back(ir::Arg::Operand(PositionOperand(v.toInt())));
      meta_stack_.push_back(v);
    } else if (ABSL_PREDICT_FALSE(is_position(i)) && v.isIntList()) {
      std::vector<int32_t> indices;  // a size-generic trace's sizes
      for (const int64_t e : v.toIntVector()) indices.push_back(PositionOperand(e, indices.size()));
      args_.push_back(ir::Arg::OperandList(std::move(indices)));
      meta_stack_.push_back(v);
    } else if (IsGeneratorType(type)) {
      at::Generator gen = v.isNone() ? runtime::DefaultNeuronGenerator(static_cast<c10::DeviceIndex>(device_))
                                     : v.toGenerator();
      TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1, "expected a neuron generator for ",
                  name, " on neuron:", device_, ", got a generator for ", gen.device());
      draws_ = true;
      operands_.push_back(ir::Value{ir::Node::MakeGenerator(std::make_shared<GeneratorLeaf>(gen)), 0});
      args_.push_back(ir::Arg::Operand(static_cast<int32_t>(operands_.size() - 1)));
      meta_stack_.push_back(c10::IValue());
      signature_.Tagged(OpSignature::kGenerator);
    } else if (c_.schema.arguments()[i].name() == "pin_memory" && v.isBool() && v.toBool()) {
      TORCH_CHECK(false, "only CPU tensors can be pinned, not neuron tensors (in ", name, ")");
    } else if (Unwrapped(type)->kind() == c10::TypeKind::LayoutType && v.isInt() &&
               static_cast<c10::Layout>(v.toInt()) != c10::kStrided) {
      TORCH_CHECK(false, "neuron devices only hold strided tensors, got layout ",
                  static_cast<c10::Layout>(v.toInt()), " (in ", name, ")");
    } else if (Unwrapped(type)->kind() == c10::TypeKind::ScalarTypeType && v.isInt()) {
      runtime::CheckSupportedDtype(static_cast<c10::ScalarType>(v.toInt()));
      args_.push_back(ir::Arg::Attr(v));
      meta_stack_.push_back(v);
      signature_.Tagged(OpSignature::kDtype).Word(static_cast<uint64_t>(v.toInt()));
    } else if (v.isDevice()) {
      args_.push_back(ir::Arg::Attr(v));
      const bool neuron = v.toDevice().type() == c10::DeviceType::PrivateUse1;
      meta_stack_.push_back(neuron ? c10::IValue(c10::Device(c10::DeviceType::Meta)) : v);
      signature_.Tagged(OpSignature::kDevice)
          .Word(static_cast<uint64_t>(v.toDevice().type()))
          .Word(static_cast<uint64_t>(v.toDevice().index()));
    } else {
      ir::hash_t h = 0;
      if (!ir::HashIValue(v, &h)) return std::string("it takes a ") + v.tagKind() + " argument";
      args_.push_back(ir::Arg::Attr(v));
      meta_stack_.push_back(v);
      signature_.Tagged(OpSignature::kAttr).Add(h);
    }
  }
  return std::nullopt;
}

torch::jit::Stack ArgumentBinder::TakeMetaStack() {
  for (const DeferredMeta& d : deferred_) {
    at::Tensor t = MetaTensor(*d.shape, d.layout);
    c10::IValue& slot = meta_stack_[d.position];
    if (d.element < 0) {
      slot = t;
    } else if (slot.isTensorList()) {
      slot.toTensorList().set(d.element, t);
    } else {
      slot.toOptionalTensorList().set(d.element, t);
    }
  }
  return std::move(meta_stack_);
}

}  // namespace torch_neuron::lazy

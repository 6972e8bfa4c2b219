#include "lazy/op_signature.h"

#include <c10/core/DefaultDtype.h>
#include <c10/util/SmallVector.h>

#include <algorithm>

#include "ir/node.h"
#include "ir/shape.h"
#include "ir/op_schema.h"

namespace torch_neuron::lazy {

c10::ScalarType ScalarDtype(const c10::Scalar& s) {
  if (s.isBoolean()) return c10::ScalarType::Bool;
  if (s.isIntegral(false)) return c10::ScalarType::Long;
  return c10::ScalarType::Double;
}

OpSignature::OpSignature(ir::hash_t name) {
  Add(name);
  Word(static_cast<uint64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
}

namespace {

// The value of a 0-dim CPU tensor; a Python number's read without a dispatch.
c10::Scalar CpuScalarValue(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kLong:
      return *t.const_data_ptr<int64_t>();
    case at::kDouble:
      return *t.const_data_ptr<double>();
    case at::kBool:
      return *t.const_data_ptr<bool>();
    default:
      return t.item();
  }
}

// A tensor's words, as the tracer's ArgumentBinder::TensorOperand writes them.
bool AddTensor(const at::Tensor& t, NumberValues values, bool cut_sizes, OpSignature* signature) {
  if (!t.defined()) {
    signature->Tagged(OpSignature::kUndefined);
    return true;
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->has_symbolic_sizes_strides()) return false;
  if (t.device().is_cpu() && t.dim() == 0) {
    const bool wrapped = impl->is_wrapped_number();
    ir::hash_t value_hash = 0;
    if (!wrapped || KeepsValue(values, t.scalar_type()))
      ir::HashIValue(c10::IValue(CpuScalarValue(t)), &value_hash);
    signature->CpuScalar(t.scalar_type(), wrapped, value_hash);
    return true;
  }
  if (cut_sizes) {
    c10::SmallVector<int64_t, 6> sizes;
    for (int64_t s : t.sizes()) sizes.push_back(std::min<int64_t>(s, 1));
    signature->Tensor(ir::HashShape(t.scalar_type(), sizes), TensorLayout{});
  } else {
    signature->Tensor(ir::HashShape(t.scalar_type(), t.sizes()), TensorLayout::Of(t));
  }
  if (t.is_conj() || t.is_neg()) {
    signature->Tagged(OpSignature::kBits)
        .Word(static_cast<uint64_t>(t.is_conj()) | uint64_t{t.is_neg()} << 1);
  }
  return true;
}

void AddScalar(const c10::Scalar& s, NumberValues values, OpSignature* signature) {
  const c10::ScalarType dtype = ScalarDtype(s);
  ir::hash_t value_hash = 0;
  if (KeepsValue(values, dtype)) ir::HashIValue(c10::IValue(s), &value_hash);
  signature->Scalar(dtype, value_hash);
}

}  // namespace

bool AddArguments(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
                  NumberValues values, bool cut_sizes, OpSignature* signature) {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& v = stack[base + i];
    // real_type(): a ScalarType, Layout or MemoryFormat argument's type() is int.
    const c10::TypePtr& type = arguments[i].real_type();
    const c10::TypeKind kind = ir::Unwrapped(type)->kind();
    if (v.isTensor()) {
      if (!AddTensor(v.toTensor(), values, cut_sizes, signature)) return false;
    } else if (ir::IsListOf(type, c10::TypeKind::TensorType) && v.isList()) {
      return false;
    } else if (ir::IsNumberType(type) && !v.isNone()) {
      if (v.isSymInt() || v.isSymFloat() || v.isSymBool()) return false;
      AddScalar(v.toScalar(), values, signature);
    } else if (ir::IsListOf(type, c10::TypeKind::NumberType) && v.isList()) {
      for (const c10::IValue& e : v.toListRef()) AddScalar(e.toScalar(), values, signature);
    } else if (ir::IsGeneratorType(type)) {
      signature->Tagged(OpSignature::kGenerator);
    } else if (kind == c10::TypeKind::ScalarTypeType && v.isInt()) {
      signature->Tagged(OpSignature::kDtype).Word(static_cast<uint64_t>(v.toInt()));
    } else if (v.isDevice()) {
      signature->Tagged(OpSignature::kDevice)
          .Word(static_cast<uint64_t>(v.toDevice().type()))
          .Word(static_cast<uint64_t>(v.toDevice().index()));
    } else {
      ir::hash_t h = 0;
      if (!ir::HashIValue(v, &h)) return false;
      signature->Tagged(OpSignature::kAttr).Add(h);
    }
  }
  return true;
}

}  // namespace torch_neuron::lazy

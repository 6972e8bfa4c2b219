#include "base/dtypes.h"

#include <c10/util/Exception.h>

#include <array>
#include <string>

namespace torch_neuron {
namespace {

using c10::ScalarType;

const std::vector<DtypeFacts>& Table() {
  // type, short, python, kernel C type, host only, exact in float32
  static const auto* table = new std::vector<DtypeFacts>{
      {ScalarType::Float, "f32", "float32", "float", false, true},
      {ScalarType::Double, "f64", "float64", "double", false, false},
      {ScalarType::Half, "f16", "float16", "uint16_t", false, true},
      {ScalarType::BFloat16, "bf16", "bfloat16", "uint16_t", false, true},
      {ScalarType::ComplexFloat, "c64", "complex64", nullptr, false, false},
      {ScalarType::ComplexDouble, "c128", "complex128", nullptr, false, false},
      {ScalarType::Byte, "u8", "uint8", "uint8_t", false, true},
      {ScalarType::UInt16, "u16", "uint16", nullptr, true, false},
      {ScalarType::UInt32, "u32", "uint32", nullptr, true, false},
      {ScalarType::UInt64, "u64", "uint64", nullptr, true, false},
      {ScalarType::Char, "i8", "int8", "int8_t", false, true},
      {ScalarType::Short, "i16", "int16", "int16_t", false, true},
      {ScalarType::Int, "i32", "int32", "int32_t", false, false},
      {ScalarType::Long, "i64", "int64", "int64_t", false, false},
      {ScalarType::Bool, "b8", "bool", "bool", false, true},
  };
  return *table;
}

// FactsOf by enum value: a direct index, no search on the hot path.
const std::array<const DtypeFacts*, static_cast<size_t>(ScalarType::NumOptions)>& Index() {
  static const auto* index = [] {
    auto* built = new std::array<const DtypeFacts*, static_cast<size_t>(ScalarType::NumOptions)>();
    built->fill(nullptr);
    for (const DtypeFacts& row : Table()) (*built)[static_cast<size_t>(row.type)] = &row;
    return built;
  }();
  return *index;
}

}  // namespace

const std::vector<DtypeFacts>& SupportedDtypes() { return Table(); }

const DtypeFacts* FactsOf(ScalarType dtype) {
  const auto i = static_cast<size_t>(dtype);
  return i < Index().size() ? Index()[i] : nullptr;
}

bool IsSupportedDtype(ScalarType dtype) { return FactsOf(dtype) != nullptr; }

bool IsHostOnlyDtype(ScalarType dtype) {
  const DtypeFacts* facts = FactsOf(dtype);
  return facts != nullptr && facts->host_only;
}

void CheckSupportedDtype(ScalarType dtype) {
  if (IsSupportedDtype(dtype)) return;
  std::string supported;
  for (const DtypeFacts& row : Table()) {
    if (!supported.empty()) supported += ", ";
    supported += row.python_name;
  }
  TORCH_CHECK_TYPE(false, "neuron devices do not support dtype ", c10::toString(dtype),
                   "; supported: ", supported);
}

}  // namespace torch_neuron

#include "base/dtypes.h"

#include <array>

namespace torch_neuron {
namespace {

// c10::ScalarType's numbers of the supported dtypes (c10/core/ScalarType.h;
// dtypes_test checks them against torch).
enum Code : int8_t {
  kByte = 0,
  kChar = 1,
  kShort = 2,
  kInt = 3,
  kLong = 4,
  kHalf = 5,
  kFloat = 6,
  kDouble = 7,
  kComplexHalf = 8,
  kComplexFloat = 9,
  kComplexDouble = 10,
  kBool = 11,
  kBFloat16 = 15,
  kUInt16 = 27,
  kUInt32 = 28,
  kUInt64 = 29,
};

// Above every supported code: the index's size.
constexpr int kCodes = 64;

const std::vector<DtypeFacts>& Table() {
  // code, short, python, kernel C type, host only, exact in float32
  static const auto* table = new std::vector<DtypeFacts>{
      {kFloat, "f32", "float32", "float", false, true},
      {kDouble, "f64", "float64", "double", false, false},
      {kHalf, "f16", "float16", "uint16_t", false, true},
      {kBFloat16, "bf16", "bfloat16", "uint16_t", false, true},
      {kComplexFloat, "c64", "complex64", nullptr, false, false},
      {kComplexDouble, "c128", "complex128", nullptr, false, false},
      {kComplexHalf, "c32", "complex32", nullptr, true, false},
      {kByte, "u8", "uint8", "uint8_t", false, true},
      {kUInt16, "u16", "uint16", nullptr, true, false},
      {kUInt32, "u32", "uint32", nullptr, true, false},
      {kUInt64, "u64", "uint64", nullptr, true, false},
      {kChar, "i8", "int8", "int8_t", false, true},
      {kShort, "i16", "int16", "int16_t", false, true},
      {kInt, "i32", "int32", "int32_t", false, false},
      {kLong, "i64", "int64", "int64_t", false, false},
      {kBool, "b8", "bool", "bool", false, true},
  };
  return *table;
}

// FactsOfCode by code: a direct index, no search on the hot path.
const std::array<const DtypeFacts*, kCodes>& Index() {
  static const auto* index = [] {
    auto* built = new std::array<const DtypeFacts*, kCodes>();
    built->fill(nullptr);
    for (const DtypeFacts& row : Table()) (*built)[row.code] = &row;
    return built;
  }();
  return *index;
}

}  // namespace

const std::vector<DtypeFacts>& SupportedDtypes() { return Table(); }

const DtypeFacts* FactsOfCode(int code) { return code >= 0 && code < kCodes ? Index()[code] : nullptr; }

}  // namespace torch_neuron

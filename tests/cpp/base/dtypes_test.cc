#include "base/dtypes.h"

#include <c10/core/ScalarType.h>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "runtime/dtype_checks.h"

namespace torch_neuron {
namespace {

using c10::ScalarType;

ScalarType TypeOf(const DtypeFacts& row) { return static_cast<ScalarType>(row.code); }

// The table is torch-free: its codes and names must be torch's.
TEST(DtypeTableTest, CodesAndNamesAreTorchs) {
  for (const DtypeFacts& row : SupportedDtypes()) {
    SCOPED_TRACE(row.python_name);
    EXPECT_EQ(std::string(c10::getDtypeNames(TypeOf(row)).first), row.python_name);
    EXPECT_EQ(FactsOfCode(row.code), &row);
  }
  EXPECT_EQ(FactsOf(ScalarType::UInt64)->code, static_cast<int>(ScalarType::UInt64));
  EXPECT_EQ(FactsOfCode(-1), nullptr);
  EXPECT_EQ(FactsOfCode(1000), nullptr);
}

TEST(DtypeTableTest, SixteenDtypesOnceEachWithDistinctNames) {
  std::set<ScalarType> types;
  std::set<std::string> short_names, python_names;
  for (const DtypeFacts& row : SupportedDtypes()) {
    types.insert(TypeOf(row));
    short_names.insert(row.short_name);
    python_names.insert(row.python_name);
    EXPECT_EQ(FactsOf(TypeOf(row)), &row);
  }
  EXPECT_EQ(SupportedDtypes().size(), 16u);
  EXPECT_EQ(types.size(), 16u);
  EXPECT_EQ(short_names.size(), 16u);
  EXPECT_EQ(python_names.size(), 16u);
}

TEST(DtypeTableTest, UnsupportedDtypesHaveNoRowAndAreRefusedByName) {
  for (ScalarType t :
       {ScalarType::QInt8, ScalarType::Float8_e4m3fn, ScalarType::Bits8, ScalarType::Undefined}) {
    EXPECT_EQ(FactsOf(t), nullptr) << c10::toString(t);
    EXPECT_FALSE(IsSupportedDtype(t));
  }
  try {
    runtime::CheckSupportedDtype(ScalarType::QInt8);
    FAIL() << "QInt8 was accepted";
  } catch (const c10::TypeError& e) {
    EXPECT_NE(
        std::string(e.what_without_backtrace())
            .find("neuron devices do not support dtype QInt8; supported: float32, float64, float16, "
                  "bfloat16, complex64, complex128, complex32, uint8, uint16, uint32, uint64, int8, int16, "
                  "int32, int64, bool"),
        std::string::npos)
        << e.what_without_backtrace();
  }
  runtime::CheckSupportedDtype(ScalarType::BFloat16);  // no throw
}

TEST(DtypeTableTest, TheFactsStagesReadAgreeWithTorch) {
  for (const DtypeFacts& row : SupportedDtypes()) {
    SCOPED_TRACE(row.python_name);
    // Host-only: exactly the unsigned types wider than a byte, and complex32.
    EXPECT_EQ(row.host_only, TypeOf(row) == ScalarType::UInt16 || TypeOf(row) == ScalarType::UInt32 ||
                                 TypeOf(row) == ScalarType::UInt64 || TypeOf(row) == ScalarType::ComplexHalf);
    EXPECT_EQ(IsHostOnlyDtype(TypeOf(row)), row.host_only);
    // Exact in float32: float32's 24-bit significand holds every value.
    const bool exact =
        TypeOf(row) == ScalarType::Float || TypeOf(row) == ScalarType::Half ||
        TypeOf(row) == ScalarType::BFloat16 || TypeOf(row) == ScalarType::Bool ||
        (c10::isIntegralType(TypeOf(row), false) && c10::elementSize(TypeOf(row)) <= 2 && !row.host_only);
    EXPECT_EQ(row.exact_in_float32, exact);
    // Kernels store every non-complex dtype they load, in a C type of its size.
    if (row.kernel_c_type != nullptr) {
      EXPECT_FALSE(c10::isComplexType(TypeOf(row)));
      EXPECT_FALSE(row.host_only);
    }
  }
  EXPECT_STREQ(FactsOf(ScalarType::BFloat16)->kernel_c_type, "uint16_t");
  EXPECT_STREQ(FactsOf(ScalarType::Float)->short_name, "f32");
  EXPECT_STREQ(FactsOf(ScalarType::ComplexDouble)->python_name, "complex128");
}

}  // namespace
}  // namespace torch_neuron

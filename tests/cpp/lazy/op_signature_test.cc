#include "lazy/op_signature.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/scalar_tensor.h>
#include <gtest/gtest.h>

#include <optional>

#include "ir/node.h"
#include "ir/shape.h"

namespace torch_neuron::lazy {
namespace {

const ir::hash_t kName = ir::Hash(std::string("aten::add.Tensor"));

c10::OperatorHandle Op(const char* name, const char* overload) {
  std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name, overload});
  EXPECT_TRUE(op.has_value()) << name;
  return *op;
}

at::Tensor Meta(std::vector<int64_t> sizes, c10::ScalarType dtype = at::kFloat) {
  return at::empty(sizes, at::TensorOptions().device(c10::kMeta).dtype(dtype));
}

// The key of add.Tensor(self, other, alpha) under `values` (sizes as given, or cut).
std::optional<ir::hash_t> AddKey(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha,
                                 NumberValues values, bool cut = false) {
  torch::jit::Stack stack = {self, other, alpha};
  OpSignature signature(kName);
  if (!AddArguments(Op("aten::add", "Tensor"), stack, 0, values, cut, &signature)) return std::nullopt;
  return signature.Hash();
}

TEST(OpSignatureTest, MetaTensorsGetTheWordsTheTracerWritesForLazyValuesOfTheirShape) {
  // The tracer keys a lazy operand by its node's shape hash (ir::Hash of its
  // Shape) and a Scalar by its dtype and (here) its integral value.
  OpSignature expected(kName);
  expected.Tensor(ir::Hash(ir::Shape(at::kFloat, {2, 3})), TensorLayout{});
  expected.Tensor(ir::Hash(ir::Shape(at::kFloat, {3})), TensorLayout{});
  ir::hash_t value = 0;
  ASSERT_TRUE(ir::HashIValue(c10::IValue(c10::Scalar(int64_t{2})), &value));
  expected.Scalar(at::kLong, value);
  EXPECT_EQ(AddKey(Meta({2, 3}), Meta({3}), 2, NumberValues::kIntegral), expected.Hash());
}

TEST(OpSignatureTest, NumbersKeepTheirValuesAsThePolicySays) {
  const at::Tensor x = Meta({4});
  EXPECT_NE(AddKey(x, x, 2, NumberValues::kIntegral), AddKey(x, x, 3, NumberValues::kIntegral));
  EXPECT_EQ(AddKey(x, x, 2.5, NumberValues::kIntegral), AddKey(x, x, 3.5, NumberValues::kIntegral));
  EXPECT_NE(AddKey(x, x, 2.5, NumberValues::kAll), AddKey(x, x, 3.5, NumberValues::kAll));
  EXPECT_EQ(AddKey(x, x, 2, NumberValues::kNone), AddKey(x, x, 3, NumberValues::kNone));
  // An int and a float of one value are different kinds under every policy.
  EXPECT_NE(AddKey(x, x, 2, NumberValues::kNone), AddKey(x, x, 2.0, NumberValues::kNone));
}

TEST(OpSignatureTest, DtypesSizesAndLayoutsKeyTensors) {
  const at::Tensor x = Meta({2, 3});
  EXPECT_NE(AddKey(x, x, 1, NumberValues::kIntegral),
            AddKey(x, Meta({2, 3}, at::kDouble), 1, NumberValues::kIntegral));
  EXPECT_NE(AddKey(x, x, 1, NumberValues::kIntegral), AddKey(x, Meta({3}), 1, NumberValues::kIntegral));
  const at::Tensor transposed = at::empty_strided({2, 3}, {1, 2}, at::TensorOptions().device(c10::kMeta));
  EXPECT_NE(AddKey(x, x, 1, NumberValues::kIntegral), AddKey(x, transposed, 1, NumberValues::kIntegral));
}

TEST(OpSignatureTest, CutSizesKeepRanksEmptyDimsAndDtypes) {
  EXPECT_EQ(AddKey(Meta({5, 3}), Meta({3}), 1, NumberValues::kAll, true),
            AddKey(Meta({2, 7}), Meta({9}), 1, NumberValues::kAll, true));
  EXPECT_NE(AddKey(Meta({5, 3}), Meta({3}), 1, NumberValues::kAll, true),
            AddKey(Meta({0, 3}), Meta({3}), 1, NumberValues::kAll, true));
  EXPECT_NE(AddKey(Meta({5, 3}), Meta({3}), 1, NumberValues::kAll, true),
            AddKey(Meta({5}), Meta({3}), 1, NumberValues::kAll, true));
}

TEST(OpSignatureTest, AnUndefinedTensorIsKeyedWhereItStands) {
  // clamp.Tensor(self, min, max): (x, undefined, t) and (x, t, undefined) differ.
  const c10::OperatorHandle clamp = Op("aten::clamp", "Tensor");
  const at::Tensor x = Meta({4});
  auto key = [&](const at::Tensor& min, const at::Tensor& max) {
    torch::jit::Stack stack = {x, min, max};
    OpSignature signature(kName);
    EXPECT_TRUE(AddArguments(clamp, stack, 0, NumberValues::kIntegral, false, &signature));
    return signature.Hash();
  };
  EXPECT_NE(key(at::Tensor(), x), key(x, at::Tensor()));
}

TEST(OpSignatureTest, AWrappedNumberIsACpuScalarKeyedByValueAsThePolicySays) {
  at::Tensor two = at::scalar_tensor(2, at::kLong);
  two.unsafeGetTensorImpl()->set_wrapped_number(true);
  at::Tensor three = at::scalar_tensor(3, at::kLong);
  three.unsafeGetTensorImpl()->set_wrapped_number(true);
  const at::Tensor x = Meta({4}, at::kLong);
  EXPECT_NE(AddKey(x, two, 1, NumberValues::kIntegral), AddKey(x, three, 1, NumberValues::kIntegral));
  EXPECT_EQ(AddKey(x, two, 1, NumberValues::kNone), AddKey(x, three, 1, NumberValues::kNone));
}

TEST(OpSignatureTest, ACallWithATensorListHasNoKey) {
  torch::jit::Stack stack = {std::vector<at::Tensor>{Meta({2}), Meta({2})}, int64_t{0}};
  OpSignature signature(kName);
  EXPECT_FALSE(AddArguments(Op("aten::cat", ""), stack, 0, NumberValues::kIntegral, false, &signature));
}

}  // namespace
}  // namespace torch_neuron::lazy

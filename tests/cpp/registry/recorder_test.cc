#include <gtest/gtest.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scalar_tensor.h>

#include <limits>

#include "lazy/trace_observer.h"
#include "registry/recorder.h"

namespace torch_neuron::registry {
namespace {

const c10::OperatorHandle& Op(const char* name, const char* overload) {
  static auto* handles = new std::map<std::string, c10::OperatorHandle>();
  const std::string key = std::string(name) + "." + overload;
  auto it = handles->find(key);
  if (it == handles->end()) {
    it = handles->emplace(key, c10::Dispatcher::singleton().findSchemaOrThrow(name, overload)).first;
  }
  return it->second;
}

const std::string kRelu = "aten::relu";

std::string Encode(const c10::OperatorHandle& op, std::vector<c10::IValue> args) {
  std::string out;
  EncodeArguments(op.schema(), args, &out);
  return out;
}

TEST(EncodeArguments, TensorsScalarsAndOptionalsInSchemaOrder) {
  const auto& add = Op("aten::add", "Tensor");
  EXPECT_EQ(Encode(add, {at::ones({2, 3}), at::ones({3}, at::kLong), c10::IValue(1)}),
            R"([{"tensor":"float32","shape":[2,3],"cpu":true},{"tensor":"int64","shape":[3],"cpu":true},1])");
  const auto& sum = Op("aten::sum", "dim_IntList");
  EXPECT_EQ(Encode(sum, {at::ones({4, 5}, at::kBFloat16), c10::IValue(std::vector<int64_t>{1, 0}),
                         c10::IValue(true), c10::IValue(static_cast<int64_t>(c10::ScalarType::Double))}),
            R"([{"tensor":"bfloat16","shape":[4,5],"cpu":true},[1,0],true,{"dtype":"float64"}])");
  EXPECT_EQ(Encode(sum, {at::ones({4}), c10::IValue(), c10::IValue(false), c10::IValue()}),
            R"([{"tensor":"float32","shape":[4],"cpu":true},null,false,null])");
}

TEST(EncodeArguments, DtypeLayoutAndMemoryFormatByTheirPythonNames) {
  const auto& empty = Op("aten::empty", "memory_format");
  EXPECT_EQ(
      Encode(empty, {c10::IValue(std::vector<int64_t>{2}), c10::IValue(static_cast<int64_t>(c10::kHalf)),
                     c10::IValue(static_cast<int64_t>(c10::kStrided)), c10::IValue(), c10::IValue(false),
                     c10::IValue(static_cast<int64_t>(c10::MemoryFormat::ChannelsLast))}),
      R"([[2],{"dtype":"float16"},{"layout":"strided"},null,false,{"memory_format":"channels_last"}])");
}

TEST(EncodeArguments, FloatsStayFloatsAndSpecialValuesAreJsonTokens) {
  const auto& mul = Op("aten::mul", "Scalar");
  const at::Tensor x = at::ones({2});
  EXPECT_EQ(Encode(mul, {x, c10::IValue(1.0)}), R"([{"tensor":"float32","shape":[2],"cpu":true},1.0])");
  EXPECT_EQ(Encode(mul, {x, c10::IValue(0.25)}), R"([{"tensor":"float32","shape":[2],"cpu":true},0.25])");
  EXPECT_EQ(Encode(mul, {x, c10::IValue(std::numeric_limits<double>::infinity())}),
            R"([{"tensor":"float32","shape":[2],"cpu":true},Infinity])");
  EXPECT_EQ(Encode(mul, {x, c10::IValue(std::nan(""))}),
            R"([{"tensor":"float32","shape":[2],"cpu":true},NaN])");
}

TEST(EncodeArguments, StridesOfANonContiguousTensorAndScalarTensorValues) {
  const auto& relu = Op("aten::relu", "");
  const at::Tensor t = at::arange(6, at::kFloat).reshape({2, 3}).t();
  EXPECT_EQ(Encode(relu, {t}), R"([{"tensor":"float32","shape":[3,2],"strides":[1,3],"cpu":true}])");
  EXPECT_EQ(Encode(relu, {at::scalar_tensor(2.5, at::kDouble)}),
            R"([{"tensor":"float64","shape":[],"cpu":true,"value":2.5}])");
  const auto& div = Op("aten::div", "Tensor_mode");
  EXPECT_EQ(
      Encode(div, {at::ones({1}), at::ones({1}), c10::IValue(std::string("fl\"oor"))}),
      R"([{"tensor":"float32","shape":[1],"cpu":true},{"tensor":"float32","shape":[1],"cpu":true},"fl\"oor"])");
}

TEST(ShapeRecorder, CountsRepeatsPerTagAndKeepsFallbacksApart) {
  ShapeRecorder recorder;
  const auto& relu = Op("aten::relu", "");
  std::vector<c10::IValue> args = {at::ones({3})};
  recorder.SetTag("a");
  for (int i = 0; i < 3; ++i) recorder.OnTracedOp(lazy::TracedOp{relu, kRelu, args});
  recorder.OnTracedOp(lazy::TracedOp{relu, kRelu, args, "no Meta kernel"});
  recorder.SetTag("b");
  recorder.OnTracedOp(lazy::TracedOp{relu, kRelu, args});
  EXPECT_EQ(recorder.size(), 3u);
  std::vector<Record> records = recorder.Take();
  std::sort(records.begin(), records.end(), [](const Record& x, const Record& y) {
    return std::tie(x.tag, x.fallback_reason) < std::tie(y.tag, y.fallback_reason);
  });
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].tag, "a");
  EXPECT_EQ(records[0].op, "aten::relu");
  EXPECT_EQ(records[0].args, R"([{"tensor":"float32","shape":[3],"cpu":true}])");
  EXPECT_EQ(records[0].fallback_reason, "");
  EXPECT_EQ(records[0].count, 3);
  EXPECT_EQ(records[1].fallback_reason, "no Meta kernel");
  EXPECT_EQ(records[1].count, 1);
  EXPECT_EQ(records[2].tag, "b");
  EXPECT_EQ(records[2].count, 1);
  EXPECT_EQ(recorder.size(), 0u);
}

class CountingObserver : public lazy::TraceObserver {
 public:
  void OnTracedOp(const lazy::TracedOp& op) override {
    ++calls;
    if (op.fallback_reason != nullptr) last_reason = op.fallback_reason;
    if (throws) throw std::runtime_error("observer failure");
  }
  int calls = 0;
  bool throws = false;
  std::string last_reason;
};

TEST(TraceObservers, AddNotifyRemoveAndAThrowingObserverIsIgnored) {
  auto first = std::make_shared<CountingObserver>();
  auto second = std::make_shared<CountingObserver>();
  second->throws = true;
  EXPECT_FALSE(lazy::HasTraceObservers());
  lazy::AddTraceObserver(first);
  lazy::AddTraceObserver(second);
  EXPECT_TRUE(lazy::HasTraceObservers());
  std::vector<c10::IValue> args = {at::ones({1})};
  lazy::NotifyTraceObservers(lazy::TracedOp{Op("aten::relu", ""), kRelu, args, "why"});
  EXPECT_EQ(first->calls, 1);
  EXPECT_EQ(second->calls, 1);
  EXPECT_EQ(first->last_reason, "why");
  lazy::RemoveTraceObserver(second.get());
  lazy::NotifyTraceObservers(lazy::TracedOp{Op("aten::relu", ""), kRelu, args});
  EXPECT_EQ(first->calls, 2);
  EXPECT_EQ(second->calls, 1);
  lazy::RemoveTraceObserver(first.get());
  EXPECT_FALSE(lazy::HasTraceObservers());
}

TEST(ObservedOpScope, EachScopeSeesOnlyItsOwnOpsFallback) {
  lazy::ObservedOpScope outer;
  {
    lazy::ObservedOpScope inner;
    lazy::ObservedOpScope::NoteFallback("inner reason");
    EXPECT_STREQ(inner.fallback_reason(), "inner reason");
  }
  EXPECT_EQ(outer.fallback_reason(), nullptr);
  lazy::ObservedOpScope::NoteFallback("outer reason");
  lazy::ObservedOpScope::NoteFallback("a second one is not kept");
  EXPECT_STREQ(outer.fallback_reason(), "outer reason");
}

}  // namespace
}  // namespace torch_neuron::registry

#include "base/config.h"
#include "base/error_kind.h"

#include <gtest/gtest.h>

namespace torch_neuron {
namespace {

TEST(ConfigTest, DefaultsWhenNothingIsSet) {
  absl::StatusOr<Config> c = ConfigFromMap({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mode, ExecutionMode::kLazy);
  EXPECT_EQ(c->devices.num_devices, 1);
  EXPECT_EQ(c->devices.memory_limit_bytes, 0);
  EXPECT_TRUE(c->trace.allow_cpu_fallback);
  EXPECT_EQ(c->run.kernel_threads, 0);
}

TEST(ConfigTest, ParsesEveryKnownVariable) {
  absl::StatusOr<Config> c = ConfigFromMap({{"TORCH_NEURON_MODE", "Eager"},
                                            {"TORCH_NEURON_NUM_DEVICES", " 4 "},
                                            {"TORCH_NEURON_MEMORY_LIMIT_MB", "64"},
                                            {"TORCH_NEURON_FALLBACK", "off"},
                                            {"TORCH_NEURON_CACHE", "0"},
                                            {"TORCH_NEURON_CACHE_DIR", "/tmp/x"},
                                            {"TORCH_NEURON_KERNEL_THREADS", "2"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mode, ExecutionMode::kEager);
  EXPECT_EQ(c->devices.num_devices, 4);
  EXPECT_EQ(c->devices.memory_limit_bytes, 64 << 20);
  EXPECT_FALSE(c->trace.allow_cpu_fallback);
  EXPECT_FALSE(c->cache.enabled);
  EXPECT_EQ(c->cache.dir, "/tmp/x");
  EXPECT_EQ(c->run.kernel_threads, 2);
}

TEST(ConfigTest, MalformedValueNamesVariableAndValue) {
  absl::StatusOr<Config> c = ConfigFromMap({{"TORCH_NEURON_NUM_DEVICES", "two"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "TORCH_NEURON_NUM_DEVICES='two' is not valid: expected an integer from 1 to 64.");
}

TEST(ConfigTest, OutOfRangeAndUnknownWordsAreRejected) {
  EXPECT_FALSE(ConfigFromMap({{"TORCH_NEURON_NUM_DEVICES", "0"}}).ok());
  EXPECT_FALSE(ConfigFromMap({{"TORCH_NEURON_NUM_DEVICES", "65"}}).ok());
  EXPECT_FALSE(ConfigFromMap({{"TORCH_NEURON_MEMORY_LIMIT_MB", "-1"}}).ok());
  EXPECT_FALSE(ConfigFromMap({{"TORCH_NEURON_MODE", "fast"}}).ok());
  EXPECT_FALSE(ConfigFromMap({{"TORCH_NEURON_FALLBACK", "maybe"}}).ok());
  EXPECT_FALSE(ConfigFromMap({{"TORCH_NEURON_KERNEL_THREADS", "257"}}).ok());
}

TEST(ConfigTest, ScopedOverrideRestoresPreviousConfig) {
  const int before = GlobalConfig().devices.num_devices;
  {
    Config c;
    c.devices.num_devices = 7;
    ScopedConfigOverride guard(c);
    EXPECT_EQ(GlobalConfig().devices.num_devices, 7);
  }
  EXPECT_EQ(GlobalConfig().devices.num_devices, before);
}

}  // namespace
}  // namespace torch_neuron

namespace torch_neuron {
namespace {

TEST(ErrorKindTest, OneTableFromStatusCodeToException) {
  EXPECT_EQ(ErrorKindFor(absl::StatusCode::kResourceExhausted), ErrorKind::kOutOfMemory);
  EXPECT_EQ(ErrorKindFor(absl::StatusCode::kInvalidArgument), ErrorKind::kValue);
  EXPECT_EQ(ErrorKindFor(absl::StatusCode::kOutOfRange), ErrorKind::kIndex);
  EXPECT_EQ(ErrorKindFor(absl::StatusCode::kUnimplemented), ErrorKind::kNotImplemented);
  for (absl::StatusCode code :
       {absl::StatusCode::kInternal, absl::StatusCode::kNotFound, absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kDataLoss, absl::StatusCode::kUnavailable, absl::StatusCode::kUnknown}) {
    EXPECT_EQ(ErrorKindFor(code), ErrorKind::kRuntime) << absl::StatusCodeToString(code);
  }
  EXPECT_STREQ(ErrorKindName(ErrorKind::kOutOfMemory), "torch.OutOfMemoryError");
  EXPECT_STREQ(ErrorKindName(ErrorKind::kRuntime), "RuntimeError");
}

TEST(ErrorKindTest, ARecordedKindOverridesTheCodeAndSurvivesContext) {
  const absl::Status type_error = WithErrorKind(absl::InvalidArgumentError("bad dtype"), ErrorKind::kType);
  EXPECT_EQ(ErrorKindOf(type_error), ErrorKind::kType);
  EXPECT_EQ(ErrorKindOf(absl::InvalidArgumentError("bad dtype")), ErrorKind::kValue);
  const absl::Status framed = WithTrailingContext(WithContext(type_error, "in aten::add"), "at train.py:3");
  EXPECT_EQ(framed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(framed.message(), "in aten::add: bad dtype (at train.py:3)");
  EXPECT_EQ(ErrorKindOf(framed), ErrorKind::kType);
  // Recording the kind the code already names records nothing.
  const absl::Status plain = WithErrorKind(type_error, ErrorKind::kValue);
  EXPECT_EQ(plain, absl::InvalidArgumentError("bad dtype"));
  EXPECT_TRUE(WithErrorKind(absl::OkStatus(), ErrorKind::kType).ok());
  EXPECT_TRUE(WithContext(absl::OkStatus(), "context").ok());
}

}  // namespace
}  // namespace torch_neuron

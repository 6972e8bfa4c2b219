#include "runtime/torch_status.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace torch_neuron::runtime {
namespace {

// What ThrowIfError throws, caught back as a Status.
absl::Status RoundTrip(const absl::Status& status) {
  try {
    ThrowIfError(status);
  } catch (...) {
    return StatusFromCurrentException();
  }
  return absl::OkStatus();
}

TEST(TorchStatusTest, EveryKindSurvivesTheTripThroughAC10Exception) {
  const std::vector<absl::Status> statuses = {
      absl::ResourceExhaustedError("out of memory"),
      absl::InvalidArgumentError("bad value"),
      WithErrorKind(absl::InvalidArgumentError("bad type"), ErrorKind::kType),
      absl::OutOfRangeError("index 7 is out of bounds"),
      absl::UnimplementedError("no kernel"),
      WithErrorKind(absl::UnknownError("not positive-definite"), ErrorKind::kLinAlg),
      absl::InternalError("broken"),
  };
  for (const absl::Status& status : statuses) {
    const absl::Status back = RoundTrip(status);
    EXPECT_EQ(ErrorKindOf(back), ErrorKindOf(status)) << status;
    EXPECT_EQ(back.message(), status.message()) << "no backtrace, no prefix";
  }
  EXPECT_TRUE(RoundTrip(absl::OkStatus()).ok());
}

TEST(TorchStatusTest, TheC10ClassIsThrownForEachKind) {
  EXPECT_THROW(ThrowIfError(absl::ResourceExhaustedError("x")), c10::OutOfMemoryError);
  EXPECT_THROW(ThrowIfError(absl::OutOfRangeError("x")), c10::IndexError);
  EXPECT_THROW(ThrowIfError(WithErrorKind(absl::InvalidArgumentError("x"), ErrorKind::kType)),
               c10::TypeError);
  EXPECT_THROW(ThrowIfError(absl::InvalidArgumentError("x")), c10::ValueError);
  EXPECT_THROW(ThrowIfError(absl::UnimplementedError("x")), c10::NotImplementedError);
  EXPECT_THROW(ThrowIfError(WithErrorKind(absl::UnknownError("x"), ErrorKind::kLinAlg)), c10::LinAlgError);
  EXPECT_THROW(ThrowIfError(absl::NotFoundError("x")), c10::Error);
}

TEST(TorchStatusTest, ForeignExceptionsMapByWhatTheyAre) {
  EXPECT_EQ(StatusFromException(std::bad_alloc()).code(), absl::StatusCode::kResourceExhausted);
  const absl::Status other = StatusFromException(std::runtime_error("gloo: peer closed"));
  EXPECT_EQ(other.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(other.message(), "gloo: peer closed");
  EXPECT_EQ(ErrorKindOf(other), ErrorKind::kRuntime);
}

}  // namespace
}  // namespace torch_neuron::runtime

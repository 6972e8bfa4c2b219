#include "runtime/execution_queue.h"

#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <atomic>
#include <stdexcept>

namespace torch_neuron::runtime {
namespace {

// A work item that throws must not terminate the process (an exception that
// leaves the queue's thread would): it fails with the exception's message,
// reported at the next TakeError, and later items still run.
TEST(ExecutionQueueTest, AThrowingItemBecomesTheQueuesError) {
  ExecutionQueue queue(0);
  std::atomic<int> ran{0};
  queue.Enqueue([]() -> absl::Status { TORCH_CHECK(false, "IValue is not a Scalar"); });
  queue.Enqueue([]() -> absl::Status { throw std::runtime_error("second"); });
  queue.Enqueue([&]() { ran.fetch_add(1); return absl::OkStatus(); });
  queue.Drain();
  EXPECT_EQ(ran.load(), 1);
  absl::Status error = queue.TakeError();
  EXPECT_EQ(error.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(error.message(), "IValue is not a Scalar");  // the first error, without a backtrace
  EXPECT_TRUE(queue.TakeError().ok());
}

}  // namespace
}  // namespace torch_neuron::runtime

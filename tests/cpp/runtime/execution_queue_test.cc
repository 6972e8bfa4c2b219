#include "runtime/execution_queue.h"

#include <gtest/gtest.h>

#include "base/error_kind.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <thread>
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
  queue.Enqueue([&]() {
    ran.fetch_add(1);
    return absl::OkStatus();
  });
  queue.Drain();
  EXPECT_EQ(ran.load(), 1);
  absl::Status error = queue.TakeError();
  EXPECT_EQ(error.code(), absl::StatusCode::kUnknown);   // a c10::Error: RuntimeError
  EXPECT_EQ(error.message(), "IValue is not a Scalar");  // the first error, without a backtrace
  EXPECT_TRUE(queue.TakeError().ok());
}

// The error keeps the kind of the exception (runtime/torch_status.h), so a
// reader raises the same Python type as the thrower.
TEST(ExecutionQueueTest, AThrownExceptionKeepsItsKind) {
  ExecutionQueue queue(0);
  queue.Enqueue([]() -> absl::Status { TORCH_CHECK_INDEX(false, "index 7 is out of range"); });
  queue.Drain();
  absl::Status error = queue.TakeError();
  EXPECT_EQ(ErrorKindOf(error), ErrorKind::kIndex);
  EXPECT_EQ(error.message(), "index 7 is out of range");
}

// A reader that met an item's error raises it itself: ForgetError clears it,
// even when the item is still reporting it (it waits for that), and keeps any
// other error.
TEST(ExecutionQueueTest, AnErrorAReaderRaisedIsForgottenOnceTheItemReportedIt) {
  ExecutionQueue queue(0);
  std::atomic<bool> reading{false};
  const absl::Status failure = absl::InternalError("index out of range");
  queue.Enqueue([&]() {
    reading.store(true);  // the reader sees the failed buffer now ...
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return failure;  // ... and the queue keeps the error only later
  });
  while (!reading.load()) std::this_thread::yield();
  queue.ForgetError(failure);
  EXPECT_TRUE(queue.TakeError().ok());

  queue.Enqueue([] { return absl::InternalError("another"); });
  queue.ForgetError(failure);
  EXPECT_EQ(queue.TakeError().message(), "another");
}

}  // namespace
}  // namespace torch_neuron::runtime

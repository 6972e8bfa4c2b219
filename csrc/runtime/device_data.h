// DeviceData: one contiguous buffer in a neuron device's memory holding a
// tensor's data, or the promise of it.
//
// Data uploaded from the host is ready at once. A graph's outputs are created
// pending when the graph is queued and fulfilled (or failed) when it has run on
// the device's queue; readers Wait(). A failed buffer keeps the error, which
// every reader gets.
//
// Thread-safe: the state behind mu_ is set once by the executing thread and read
// by any other.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::runtime {

class DeviceData {
 public:
  // A pending buffer for a tensor of `dtype` and `sizes` on `device`.
  DeviceData(int device, c10::ScalarType dtype, std::vector<int64_t> sizes);

  // Uploads `host` (any layout; made contiguous in `dtype`) to `device`.
  // RESOURCE_EXHAUSTED past the device's memory limit.
  static absl::StatusOr<std::shared_ptr<DeviceData>> FromHost(int device, const at::Tensor& host);

  int device() const { return device_; }
  c10::ScalarType dtype() const { return dtype_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t numel() const;
  size_t nbytes() const;

  // Fills the buffer with the contiguous CPU tensor `result` (same dtype and
  // numel), allocating device memory; or records `status` on failure.
  void Fulfill(const at::Tensor& result);
  // Same, writing into `donated` (a buffer of nbytes() taken from an input that
  // nothing else can read any more) instead of allocating; no copy when
  // `result` already lives there (a kernel wrote it into the donated buffer).
  void FulfillInto(c10::DataPtr donated, const at::Tensor& result);
  // Gives up this ready buffer for donation. Only for data nobody else holds.
  c10::DataPtr TakeBuffer();
  // Takes `result`'s own buffer when it already is this device's memory and
  // nothing else holds it (a fused kernel's output); false if it is not.
  bool FulfillByAdopting(const at::Tensor& result);
  // Allocates the buffer and sets every element to `value` (a factory's fill).
  void FulfillWithValue(const c10::Scalar& value);
  void Fail(absl::Status status);

  bool ready() const;
  // Blocks until fulfilled or failed; the error of a failed buffer.
  absl::Status Wait() const;

  // A CPU tensor aliasing the device buffer, for the emulated device's executor
  // (after Wait() returned OK). Not a transfer: nothing is copied.
  at::Tensor DeviceView() const;

  // Downloads to a new CPU tensor (counted as a device-to-host transfer).
  absl::StatusOr<at::Tensor> ToHost() const;

  // Downloads the element at `index` of the buffer in its logical order (a
  // transfer of one element), after Wait().
  absl::StatusOr<c10::Scalar> ReadElement(int64_t index) const;

 private:
  absl::Status AllocateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AdoptLocked(const at::Tensor& result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  const c10::ScalarType dtype_;
  const std::vector<int64_t> sizes_;
  // Lock order: before the owning DeviceArena's mu_ (allocation and adoption
  // happen under it) and, on the first transfer, the metrics registry's.
  mutable absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  c10::DataPtr buffer_ ABSL_GUARDED_BY(mu_);
};

using DeviceDataPtr = std::shared_ptr<DeviceData>;

}  // namespace torch_neuron::runtime

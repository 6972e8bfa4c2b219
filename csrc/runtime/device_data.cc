#include "runtime/device_data.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "runtime/device_registry.h"
#include "runtime/fork_guard.h"
#include "runtime/neuron_allocator.h"

namespace torch_neuron::runtime {
namespace {

struct TransferCounters {
  metrics::Counter* count;
  metrics::Counter* bytes;
  metrics::Counter* nanos;
};

const TransferCounters& Counters(bool to_device) {
  static const TransferCounters h2d = {metrics::GetCounter("transfer.host_to_device.count"),
                                       metrics::GetCounter("transfer.host_to_device.bytes"),
                                       metrics::GetCounter("transfer.host_to_device.ns")};
  static const TransferCounters d2h = {metrics::GetCounter("transfer.device_to_host.count"),
                                       metrics::GetCounter("transfer.device_to_host.bytes"),
                                       metrics::GetCounter("transfer.device_to_host.ns")};
  return to_device ? h2d : d2h;
}

void Count(bool to_device, size_t bytes, std::chrono::steady_clock::time_point start) {
  const TransferCounters& c = Counters(to_device);
  c.count->Add(1);
  c.bytes->Add(static_cast<int64_t>(bytes));
  c.nanos->Add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

DeviceData::DeviceData(int device, c10::ScalarType dtype, std::vector<int64_t> sizes)
    : device_(device), dtype_(dtype), sizes_(std::move(sizes)) {}

int64_t DeviceData::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes_) n *= s;
  return n;
}

size_t DeviceData::nbytes() const { return static_cast<size_t>(numel()) * c10::elementSize(dtype_); }

absl::Status DeviceData::AllocateLocked() {
  absl::StatusOr<c10::DataPtr> buffer = GetNeuronAllocator()->AllocateOn(device_, nbytes());
  if (!buffer.ok()) return buffer.status();
  buffer_ = std::move(buffer).value();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<DeviceData>> DeviceData::FromHost(int device, const at::Tensor& host) {
  if (!host.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot copy a tensor on ", host.device().str(),
                                                   " to neuron:", device, " as host memory"));
  }
  auto start = std::chrono::steady_clock::now();
  auto data = std::make_shared<DeviceData>(device, host.scalar_type(), host.sizes().vec());
  // Bytes are copied: a conjugated or negated view's must be resolved first.
  at::Tensor contiguous = host.resolve_conj().resolve_neg().contiguous();
  absl::MutexLock lock(&data->mu_);
  absl::Status status = data->AllocateLocked();
  if (!status.ok()) return status;
  if (data->nbytes() > 0) std::memcpy(data->buffer_.get(), contiguous.data_ptr(), data->nbytes());
  data->ready_ = true;
  Count(/*to_device=*/true, data->nbytes(), start);
  return data;
}

bool DeviceData::AdoptLocked(const at::Tensor& result) {
  c10::StorageImpl* storage = result.has_storage() ? result.storage().unsafeGetStorageImpl() : nullptr;
  if (storage == nullptr || result.use_count() != 1 || result.storage().use_count() != 1 ||
      result.storage_offset() != 0 || !result.is_contiguous() || result.scalar_type() != dtype_ ||
      storage->nbytes() != nbytes() || !IsDeviceMemory(storage->data_ptr()) ||
      DeviceRegistry::Global().FindOwner(storage->data_ptr().get()) !=
          &DeviceRegistry::Global().arena(device_)) {
    return false;
  }
  buffer_ = storage->set_data_ptr(c10::DataPtr());
  ready_ = true;
  return true;
}

bool DeviceData::FulfillByAdopting(const at::Tensor& result) {
  absl::MutexLock lock(&mu_);
  return !ready_ && AdoptLocked(result);
}

void DeviceData::Fulfill(const at::Tensor& result) {
  absl::MutexLock lock(&mu_);
  if (ready_) return;
  // A result already in this device's memory that nothing else holds (a fused
  // kernel's output) becomes the buffer as it is.
  if (AdoptLocked(result)) return;
  status_ = AllocateLocked();
  if (status_.ok() && nbytes() > 0) {
    at::Tensor contiguous = result.resolve_conj().resolve_neg().contiguous();
    std::memcpy(buffer_.get(), contiguous.data_ptr(), nbytes());
  }
  ready_ = true;
}

void DeviceData::FulfillInto(c10::DataPtr donated, const at::Tensor& result) {
  absl::MutexLock lock(&mu_);
  if (ready_) return;
  buffer_ = std::move(donated);
  if (nbytes() > 0 && result.data_ptr() != buffer_.get()) {  // not already written there
    at::Tensor contiguous = result.resolve_conj().resolve_neg().contiguous();
    std::memcpy(buffer_.get(), contiguous.data_ptr(), nbytes());
  }
  ready_ = true;
}

void DeviceData::FulfillWithValue(const c10::Scalar& value) {
  absl::MutexLock lock(&mu_);
  if (ready_) return;
  status_ = AllocateLocked();
  if (status_.ok() && nbytes() > 0) {
    at::from_blob(buffer_.get(), sizes_, at::TensorOptions().dtype(dtype_).device(at::kCPU)).fill_(value);
  }
  ready_ = true;
}

c10::DataPtr DeviceData::TakeBuffer() {
  absl::MutexLock lock(&mu_);
  return std::move(buffer_);
}

void DeviceData::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (ready_) return;
  status_ = std::move(status);
  ready_ = true;
}

bool DeviceData::ready() const {
  absl::MutexLock lock(&mu_);
  return ready_;
}

absl::Status DeviceData::Wait() const {
  // A forked child's buffers are fulfilled by queue threads it does not have,
  // and their locks may have been held at the fork.
  if (InBadFork()) return BadForkError();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&ready_));
  return status_;
}

at::Tensor DeviceData::DeviceView() const {
  absl::MutexLock lock(&mu_);
  void* ptr = buffer_.get();
  static int64_t empty_placeholder = 0;
  if (ptr == nullptr) ptr = &empty_placeholder;  // zero-element tensors
  return at::from_blob(ptr, sizes_, at::TensorOptions().dtype(dtype_).device(at::kCPU));
}

absl::StatusOr<at::Tensor> DeviceData::ToHost() const {
  absl::Status status = Wait();
  if (!status.ok()) return status;
  auto start = std::chrono::steady_clock::now();
  at::Tensor host = at::empty(sizes_, at::TensorOptions().dtype(dtype_).device(at::kCPU));
  absl::MutexLock lock(&mu_);
  if (nbytes() > 0) std::memcpy(host.data_ptr(), buffer_.get(), nbytes());
  Count(/*to_device=*/false, nbytes(), start);
  return host;
}

absl::StatusOr<c10::Scalar> DeviceData::ReadElement(int64_t index) const {
  absl::Status status = Wait();
  if (!status.ok()) return status;
  if (index < 0 || index >= numel()) {
    return absl::OutOfRangeError(absl::StrCat("element ", index, " of a buffer of ", numel()));
  }
  auto start = std::chrono::steady_clock::now();
  const size_t itemsize = c10::elementSize(dtype_);
  at::Tensor host = at::empty({}, at::TensorOptions().dtype(dtype_).device(at::kCPU));
  {
    absl::MutexLock lock(&mu_);
    std::memcpy(host.data_ptr(), static_cast<const char*>(buffer_.get()) + index * itemsize, itemsize);
  }
  Count(/*to_device=*/false, itemsize, start);
  return host.item();
}

}  // namespace torch_neuron::runtime

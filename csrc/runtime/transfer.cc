#include "runtime/transfer.h"

#include <ATen/ops/from_blob.h>

#include <chrono>

#include "base/metrics.h"

namespace torch_neuron::runtime {
namespace {

struct TransferCounters {
  metrics::Counter* count;
  metrics::Counter* bytes;
  metrics::Counter* nanos;
};

TransferCounters MakeCounters(const std::string& kind) {
  return {metrics::GetCounter("transfer." + kind + ".count"),
          metrics::GetCounter("transfer." + kind + ".bytes"),
          metrics::GetCounter("transfer." + kind + ".ns")};
}

// Copies through host views of device memory, which is where the emulated DMA
// engine lives: CPU copy_ handles strides, dtype conversion and broadcasting.
void TimedCopy(const TransferCounters& counters, const at::Tensor& dst_view,
               const at::Tensor& src_view) {
  auto start = std::chrono::steady_clock::now();
  dst_view.copy_(src_view);
  auto end = std::chrono::steady_clock::now();
  counters.count->Add(1);
  counters.bytes->Add(static_cast<int64_t>(dst_view.nbytes()));
  counters.nanos->Add(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
}

}  // namespace

at::Tensor DeviceMemoryView(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(t.device().type() == c10::DeviceType::PrivateUse1,
                        "DeviceMemoryView of a ", t.device(), " tensor");
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                       at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
}

void CopyHostToDevice(const at::Tensor& dst, const at::Tensor& src) {
  static const TransferCounters counters = MakeCounters("host_to_device");
  TimedCopy(counters, DeviceMemoryView(dst), src);
}

void CopyDeviceToHost(const at::Tensor& dst, const at::Tensor& src) {
  static const TransferCounters counters = MakeCounters("device_to_host");
  TimedCopy(counters, dst, DeviceMemoryView(src));
}

void CopyDeviceToDevice(const at::Tensor& dst, const at::Tensor& src) {
  static const TransferCounters counters = MakeCounters("device_to_device");
  TimedCopy(counters, DeviceMemoryView(dst), DeviceMemoryView(src));
}

}  // namespace torch_neuron::runtime

// Transfers between host memory and neuron device memory.
//
// Every byte that crosses the host/device boundary goes through these functions,
// which count and time it ("transfer.host_to_device.bytes", ...). They accept any
// strides and dtypes: the destination's layout and dtype win, the source is
// converted and broadcast as by Tensor.copy_.
//
// Thread-safe (no shared state beyond atomic counters).
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_neuron::runtime {

// host (CPU) -> neuron
void CopyHostToDevice(const at::Tensor& dst, const at::Tensor& src);
// neuron -> host (CPU)
void CopyDeviceToHost(const at::Tensor& dst, const at::Tensor& src);
// neuron -> neuron (same or another device)
void CopyDeviceToDevice(const at::Tensor& dst, const at::Tensor& src);

// A CPU tensor aliasing the memory of neuron tensor `t` (same sizes, strides, dtype).
// Only the runtime's emulated DMA engine and executor may touch device memory
// through it; everything else goes through the copies above.
at::Tensor DeviceMemoryView(const at::Tensor& t);

}  // namespace torch_neuron::runtime

// Copy kernels of the neuron device: Tensor.copy_, .to(), .cpu() and the CPU
// fallback's copies all arrive here as _copy_from, and reading one element
// (.item(), bool(), printing) as _local_scalar_dense.
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "runtime/transfer.h"

namespace torch_neuron::lazy {
namespace {

bool IsNeuron(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  // `self` is the source. Copies are synchronous on the emulated device, so
  // non_blocking changes nothing.
  TORCH_CHECK(self.defined() && dst.defined(), "copy_ of an undefined tensor");
  if (IsNeuron(self) && IsNeuron(dst)) {
    runtime::CopyDeviceToDevice(dst, self);
  } else if (IsNeuron(dst)) {
    TORCH_CHECK(self.device().is_cpu(), "cannot copy from ", self.device(), " to ", dst.device(),
                ": neuron tensors copy to and from CPU tensors only");
    runtime::CopyHostToDevice(dst, self);
  } else {
    TORCH_CHECK(dst.device().is_cpu(), "cannot copy from ", self.device(), " to ", dst.device(),
                ": neuron tensors copy to and from CPU tensors only");
    runtime::CopyDeviceToHost(dst, self);
  }
  return dst;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return CopyFrom(self, dst, /*non_blocking=*/false);
}

at::Scalar LocalScalarDense(const at::Tensor& self) {
  at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  runtime::CopyDeviceToHost(host, self);
  return host.item();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("_local_scalar_dense", LocalScalarDense);
}

}  // namespace torch_neuron::lazy

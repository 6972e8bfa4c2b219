#include "lazy/dlpack.h"

#include <ATen/DLConvertor.h>
#include <ATen/ops/alias.h>
#include <c10/util/Exception.h>

#include <memory>
#include <vector>

#include "lazy/bridge.h"
#include "lazy/graph_executor.h"
#include "runtime/device_data.h"
#include "runtime/execution_queue.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

// What a capsule of a neuron tensor owns: the tensor (for a re-import), the
// buffer its data points into, and the shape and strides it points to.
template <class Managed>
struct Exported {
  at::Tensor tensor;
  runtime::DeviceDataPtr data;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  Managed managed{};
};

template <class Managed>
void Delete(Managed* managed) {
  delete static_cast<Exported<Managed>*>(managed->manager_ctx);
}

template <class Managed>
void SetVersion(Managed*) {}

template <>
void SetVersion<DLManagedTensorVersioned>(DLManagedTensorVersioned* managed) {
  managed->version.major = DLPACK_MAJOR_VERSION;
  managed->version.minor = DLPACK_MINOR_VERSION;
  managed->flags = 0;
}

// Runs the pending graph of `t` and waits for its buffer; an execution error
// reaches the user here, once (the queue forgets it).
runtime::DeviceDataPtr SyncedData(const at::Tensor& t) {
  LazyTensorPtr lazy = GetLazy(t);
  lazy->CheckNoLostWrite();
  GraphExecutor::Get().CheckReadAllowed(lazy->device());
  GraphExecutor::Get().Sync({lazy});
  runtime::DeviceDataPtr data = lazy->data();
  absl::Status status = data->Wait();
  if (!status.ok()) runtime::ExecutionQueue::ForDevice(lazy->device()).ForgetError(status);
  runtime::ThrowIfError(status);
  return data;
}

template <class Managed>
Managed* Export(const at::Tensor& t) {
  TORCH_CHECK(IsNeuron(t), "expected a neuron tensor, got one on ", t.device());
  auto exported = std::make_unique<Exported<Managed>>();
  exported->data = SyncedData(t);
  exported->tensor = t;
  exported->shape = t.sizes().vec();
  // The buffer holds the elements contiguously in logical order. A dim of one
  // element gets stride 1, as PyTorch's own exports normalize it (gh-83069).
  exported->strides.assign(t.dim(), 1);
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    exported->strides[d] = exported->strides[d + 1] * std::max<int64_t>(t.size(d + 1), 1);
  }
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) < 2) exported->strides[d] = 1;
  }
  Managed& managed = exported->managed;
  DLTensor& dl = managed.dl_tensor;
  dl.data = t.numel() == 0 ? nullptr : exported->data->DeviceView().data_ptr();
  dl.device = at::torchDeviceToDLDevice(t.device());  // kDLExtDev, the neuron index
  dl.ndim = static_cast<int32_t>(t.dim());
  dl.dtype = at::getDLDataType(t);
  dl.shape = exported->shape.data();
  dl.strides = exported->strides.data();
  dl.byte_offset = 0;
  SetVersion(&managed);
  managed.deleter = &Delete<Managed>;
  managed.manager_ctx = exported.get();
  return &exported.release()->managed;
}

template <class Managed>
std::optional<at::Tensor> Import(const Managed* managed) {
  if (managed->deleter == &Delete<Managed>) {
    return at::alias(static_cast<const Exported<Managed>*>(managed->manager_ctx)->tensor);
  }
  TORCH_CHECK(managed->dl_tensor.device.device_type != kDLExtDev,
              "a DLPack capsule of device type kDLExtDev (PyTorch's type for neuron tensors) that "
              "torch_neuron did not make cannot be read as a neuron tensor: neuron memory comes only "
              "from neuron's own tensors (share a CPU tensor, and move the result with .to('neuron'))");
  return std::nullopt;
}

}  // namespace

DLManagedTensor* ToDLPack(const at::Tensor& t) { return Export<DLManagedTensor>(t); }

DLManagedTensorVersioned* ToDLPackVersioned(const at::Tensor& t) {
  return Export<DLManagedTensorVersioned>(t);
}

std::optional<at::Tensor> FromDLPack(const DLManagedTensor* managed) { return Import(managed); }

std::optional<at::Tensor> FromDLPackVersioned(const DLManagedTensorVersioned* managed) {
  return Import(managed);
}

}  // namespace torch_neuron::lazy

#include "lazy/cpu_fallback.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>

#include "base/config.h"
#include "base/metrics.h"
#include "lazy/bridge.h"
#include "lazy/graph_executor.h"
#include "lazy/layouts.h"
#include "lazy/map_tensors.h"
#include "lazy/tensor_impl.h"
#include "lazy/trace_observer.h"
#include "base/dtypes.h"
#include "runtime/execution_queue.h"
#include "runtime/generator.h"
#include "ir/op_schema.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

// Downloads a neuron tensor (after its graph ran) to a new CPU tensor laid out
// as `t` reports (its strides and storage offset), so that the CPU kernel sees
// the metadata the user's tensor has (view() of a transposed tensor fails).
at::Tensor ToCpu(const LazyTensorPtr& lazy, const at::Tensor& t) {
  absl::StatusOr<at::Tensor> host = lazy->data()->ToHost();
  if (!host.ok())
    runtime::ExecutionQueue::ForDevice(lazy->device()).ForgetError(host.status());  // raised here, once
  at::Tensor dense = runtime::ValueOrThrow(std::move(host));
  const TensorLayout layout = TensorLayout::Of(t);
  if (layout.is_default()) return dense;
  at::Tensor storage =
      at::empty({StorageExtent(t.sizes(), t.strides(), layout.storage_offset)}, dense.options());
  at::Tensor laid_out = storage.as_strided(dense.sizes(), t.strides(), layout.storage_offset);
  if (at::has_internal_overlap(laid_out) != at::MemOverlap::Yes) {
    laid_out.copy_(dense);
  } else {
    // An expanded tensor (autograd's gradient of a sum): copy_ refuses to
    // write where elements share memory, so each element's value goes to its
    // storage index; elements sharing one hold the same value. (uint16/32/64
    // have no index_put kernel: their bits go as the signed type's.)
    at::Tensor index = at::arange(storage.numel(), storage.options().dtype(at::kLong))
                           .as_strided(dense.sizes(), t.strides(), layout.storage_offset);
    at::Tensor target = storage, values = dense;
    if (IsHostOnlyDtype(storage.scalar_type())) {
      const c10::ScalarType bits = storage.element_size() == 2   ? at::kShort
                                   : storage.element_size() == 4 ? at::kInt
                                                                 : at::kLong;
      target = storage.view(bits);
      values = dense.contiguous().view(bits);
    }
    target.index_put_({index.reshape(-1)}, values.reshape(-1));
  }
  return laid_out;
}

}  // namespace

std::string OpName(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  if (schema.overload_name().empty()) return schema.name();
  return schema.name() + "." + schema.overload_name();
}

void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason,
                 const TraceConfig& trace) {
  const std::string name = OpName(op);
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t base = stack->size() - num_args;

  // An explicit CPU device argument (zeros_like(x, device="cpu")) asks for CPU
  // results: the CPU kernel is the op itself, not a fallback, and its results
  // stay on the CPU.
  bool cpu_results = false;
  for (size_t i = base; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::CPU) cpu_results = true;
  }
  if (!cpu_results) {
    TORCH_CHECK_NOT_IMPLEMENTED(trace.allow_cpu_fallback, "operator ", name,
                                " cannot run on the neuron device (", reason,
                                ") and the CPU fallback is off (TORCH_NEURON_FALLBACK=0)");
    metrics::Increment(std::string(metrics::kFallbackPrefix) + name);
    if (HasTraceObservers()) ObservedOpScope::NoteFallback(reason);
  }

  // Every neuron input, materialized in one graph.
  std::vector<LazyTensorPtr> lazies;
  int device = -1;
  auto note = [&](const at::Tensor& t) {
    if (LazyTensorPtr l = TryGetLazy(t)) {
      lazies.push_back(l);
      device = l->device();
    }
  };
  for (size_t i = base; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      note(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) note(t);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) note(e.toTensor());
      }
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      device = v.toDevice().has_index() ? v.toDevice().index() : device;
    }
  }
  GraphExecutor::Get().Sync(lazies);
  if (device < 0) device = 0;

  // Arguments for the CPU kernel; remember the neuron inputs it may write.
  struct Written {
    const c10::AliasInfo* alias;
    at::Tensor original;
    LazyTensorPtr lazy;
    at::Tensor cpu;  // the CPU kernel writes this one
  };
  std::vector<Written> written;
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& v = (*stack)[base + i];
    const c10::Argument& arg = schema.arguments()[i];
    const bool writes = arg.alias_info() != nullptr && arg.alias_info()->isWrite();
    if (v.isTensor()) {
      if (LazyTensorPtr l = TryGetLazy(v.toTensor())) {
        at::Tensor cpu = ToCpu(l, v.toTensor());
        if (writes) written.push_back({arg.alias_info(), v.toTensor(), l, cpu});
        v = cpu;
      }
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> tensors = v.toTensorVector();
      for (at::Tensor& t : tensors) {
        if (LazyTensorPtr l = TryGetLazy(t)) t = ToCpu(l, t);
      }
      v = tensors;
    } else if (IsOptionalTensorListLike(v)) {
      c10::List<std::optional<at::Tensor>> list;
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) {
          LazyTensorPtr l = TryGetLazy(e.toTensor());
          list.push_back(l ? ToCpu(l, e.toTensor()) : e.toTensor());
        } else {
          list.push_back(std::nullopt);
        }
      }
      v = list;
    } else if (ir::IsGeneratorType(arg.type())) {
      // Random ops draw from the neuron generator's stream, after everything
      // already queued on the device has drawn.
      GraphExecutor::Get().WaitDevice(device);
      const at::Generator gen = v.isGenerator()
                                    ? v.toGenerator()
                                    : runtime::DefaultNeuronGenerator(static_cast<c10::DeviceIndex>(device));
      TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1, "expected a neuron generator for ",
                  name, ", got one for ", gen.device());
      v = gen.get<runtime::NeuronGeneratorImpl>()->host_generator();
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      v = c10::Device(c10::DeviceType::CPU);
    }
  }

  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  }

  // Written inputs take their new values; results go back to the device.
  auto upload = [&](const at::Tensor& cpu) {
    TORCH_CHECK_NOT_IMPLEMENTED(cpu.layout() == c10::kStrided, kSparseUnsupported, " (", name, " returns a ",
                                cpu.layout(), " tensor)");
    return runtime::ValueOrThrow(runtime::DeviceData::FromHost(device, cpu));
  };
  for (const Written& w : written) {
    w.lazy->SetData(upload(w.cpu));
    GetImpl(w.original)->RefreshSizes(TensorLayout::Of(w.cpu));
  }
  const size_t num_returns = schema.returns().size();
  const size_t ret_base = stack->size() - num_returns;
  for (size_t r = 0; r < num_returns; ++r) {
    c10::IValue& v = (*stack)[ret_base + r];
    const c10::AliasInfo* alias = schema.returns()[r].alias_info();
    if (v.isTensor()) {
      const at::Tensor cpu = v.toTensor();
      const Written* target = nullptr;
      if (alias != nullptr && alias->isWrite()) {
        for (const Written& w : written) {
          if (w.alias->beforeSets() == alias->beforeSets()) target = &w;
        }
      }
      if (target != nullptr) {
        v = target->original;  // in-place or out=: the input, updated above
      } else if (!cpu.defined() || cpu_results) {
        // An output the op was asked not to compute (a backward's output_mask),
        // or one asked for on the CPU.
      } else {
        v = MakeTensor(LazyTensor::FromData(upload(cpu)), TensorLayout::Of(cpu));
      }
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorVector()) {
        out.push_back(MakeTensor(LazyTensor::FromData(upload(t)), TensorLayout::Of(t)));
      }
      v = out;
    }
  }
}

}  // namespace torch_neuron::lazy

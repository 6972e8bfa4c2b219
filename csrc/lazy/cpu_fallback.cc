// The CPU fallback: any ATen op on neuron tensors without a neuron kernel runs
// here. Its neuron inputs are copied to the host, the CPU kernel runs, and the
// results (and in-place updates) are copied back to the device. Each run is
// counted per op ("fallback.aten::add.Tensor") in torch_neuron.metrics.
//
// Before delegating to ATen's at::native::cpu_fallback it
//  - refuses with NotImplementedError when TORCH_NEURON_FALLBACK=0;
//  - checks that every tensor argument is on one neuron device (CPU scalars, i.e.
//    0-dim CPU tensors, are allowed as on CUDA), so a stray CPU tensor is an error
//    and not a silent host computation;
//  - replaces each `Generator?` argument by a CPU generator seeded from the neuron
//    generator's next stream, so random ops follow torch.manual_seed and the
//    device's own generator state.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>

#include "base/config.h"
#include "base/metrics.h"
#include "runtime/generator.h"

namespace torch_neuron::lazy {
namespace {

bool IsNeuron(const c10::Device& d) { return d.type() == c10::DeviceType::PrivateUse1; }

std::string OpName(const c10::FunctionSchema& schema) {
  if (schema.overload_name().empty()) return schema.name();
  return schema.name() + "." + schema.overload_name();
}

// Ops whose CPU index tensors are legitimately mixed with device tensors.
bool AllowsCpuTensorArguments(const std::string& name) {
  return name.rfind("aten::index.", 0) == 0 || name.rfind("aten::index_put", 0) == 0 ||
         name.rfind("aten::_index_put_impl_", 0) == 0;
}

class DeviceChecker {
 public:
  explicit DeviceChecker(const std::string& op) : op_(op) {}

  void Visit(const at::Tensor& t) {
    if (!t.defined()) return;
    const c10::Device d = t.device();
    if (IsNeuron(d)) {
      if (!device_) {
        device_ = d;
      } else {
        TORCH_CHECK(*device_ == d, "Expected all tensors to be on the same device, but found at "
                    "least two devices, ", *device_, " and ", d, "! (in ", op_, ")");
      }
      return;
    }
    const bool cpu_scalar = d.is_cpu() && t.dim() == 0;
    TORCH_CHECK(cpu_scalar || (d.is_cpu() && AllowsCpuTensorArguments(op_)),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                device_ ? device_->str() : std::string("neuron"), " and ", d, "! (in ", op_,
                "; move the tensor with .to('neuron') first)");
  }

  void VisitValue(const c10::IValue& v) {
    if (v.isTensor()) {
      Visit(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) Visit(t);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) Visit(e.toTensor());
      }
    }
  }

  std::optional<c10::Device> device() const { return device_; }

 private:
  const std::string& op_;
  std::optional<c10::Device> device_;
};

bool IsOptionalGenerator(const c10::TypePtr& type) {
  if (auto opt = type->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return type->kind() == c10::TypeKind::GeneratorType;
}

// A CPU generator whose stream is the neuron generator's next one.
at::Generator CpuStreamFor(const c10::IValue& arg, c10::DeviceIndex device_index) {
  at::Generator neuron = arg.isNone() ? runtime::DefaultNeuronGenerator(device_index)
                                      : arg.toGenerator();
  TORCH_CHECK(IsNeuron(neuron.device()), "expected a neuron generator for an op on neuron:",
              static_cast<int>(device_index), ", got a generator for ", neuron.device());
  uint64_t stream_seed = 0;
  {
    std::lock_guard<std::mutex> lock(neuron.mutex());
    stream_seed = neuron.get<runtime::NeuronGeneratorImpl>()->NextStreamSeed();
  }
  return at::make_generator<at::CPUGeneratorImpl>(stream_seed);
}

void NeuronCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = OpName(schema);
  TORCH_CHECK_NOT_IMPLEMENTED(
      GlobalConfig().allow_cpu_fallback, "operator ", name,
      " has no neuron lowering and the CPU fallback is off (TORCH_NEURON_FALLBACK=0)");

  const size_t num_args = schema.arguments().size();
  auto args = torch::jit::last(*stack, num_args);
  DeviceChecker checker(name);
  for (const c10::IValue& v : args) checker.VisitValue(v);
  const c10::DeviceIndex device_index = checker.device() ? checker.device()->index() : -1;

  for (size_t i = 0; i < num_args; ++i) {
    if (!IsOptionalGenerator(schema.arguments()[i].type())) continue;
    c10::IValue& slot = (*stack)[stack->size() - num_args + i];
    slot = c10::IValue(CpuStreamFor(slot, device_index));
  }

  metrics::Increment(std::string(metrics::kFallbackPrefix) + name);
  at::native::cpu_fallback(op, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&NeuronCpuFallback>());
}

}  // namespace torch_neuron::lazy

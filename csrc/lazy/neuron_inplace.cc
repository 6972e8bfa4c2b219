#include "lazy/neuron_inplace.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/enum_tag.h>
#include <ATen/ops/empty_strided_native.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/forward_grad.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "lazy/bridge.h"
#include "lazy/map_tensors.h"
#include "lazy/neuron_meta.h"
#include "lazy/cpu_parity_rules.h"

namespace torch_neuron::lazy {
namespace {

namespace fimpl = at::functionalization::impl;

// The keys functionalization's own meta reference run leaves out (PyTorch's
// exclude_keys_for_meta_dispatch): transforms and Python modes do not see it.
constexpr c10::DispatchKeySet kExcludedForMeta =
    c10::functorch_transforms_ks |
    c10::DispatchKeySet({c10::DispatchKey::FuncTorchDynamicLayerBackMode,
                         c10::DispatchKey::FuncTorchDynamicLayerFrontMode, c10::DispatchKey::Python,
                         c10::DispatchKey::PreDispatch});

// Ops that keep functionalization's own kernel after the checks: their
// functional form takes other arguments than the in-place one is given
// (cumsum_'s dtype), or PyTorch's kernel handles cases of its own (copy_
// between devices).
constexpr const char* kKeepOriginalKernel[] = {"aten::cumsum_", "aten::cumprod_", "aten::copy_"};

// A meta tensor of `t`'s sizes, strides and dtype, as functionalization's
// meta reference makes it (conjugate and negative bits and the wrapped-number
// mark are not kept there either).
at::Tensor ToMeta(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::native::empty_strided_meta_symint(t.sym_sizes(), t.sym_strides(), t.scalar_type(), t.layout(),
                                               c10::Device(c10::kMeta), std::nullopt);
}

at::Tensor Unwrap(const at::Tensor& t) {
  if (!t.defined() || !fimpl::isFunctionalTensor(t)) return t;
  fimpl::sync(t);
  return fimpl::from_functional_tensor(t);
}

// The functional form of in-place `op` ("aten::add" for "aten::add_", the
// same overload) when it takes the same arguments and returns what `op`
// writes; nullopt otherwise.
std::optional<c10::OperatorHandle> FunctionalForm(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  for (const char* name : kKeepOriginalKernel) {
    if (schema.name() == name) return std::nullopt;
  }
  if (op.hasTag(at::Tag::inplace_view)) return std::nullopt;
  std::string name = schema.name();
  if (name.rfind("aten::__i", 0) == 0) {
    name = "aten::__" + name.substr(9);  // __iand__ -> __and__
  } else if (!name.empty() && name.back() == '_') {
    name.pop_back();
  } else {
    return std::nullopt;
  }
  std::optional<c10::OperatorHandle> functional =
      c10::Dispatcher::singleton().findOp(c10::OperatorName(name, schema.overload_name()));
  if (!functional) return std::nullopt;
  const c10::FunctionSchema& f = functional->schema();
  if (f.arguments().size() != schema.arguments().size() || f.returns().size() != 1 || f.is_mutable()) {
    return std::nullopt;
  }
  for (size_t i = 0; i < f.arguments().size(); ++i) {
    if (*f.arguments()[i].type() != *schema.arguments()[i].type()) return std::nullopt;
  }
  if (*f.returns()[0].type() != *schema.arguments()[0].type()) return std::nullopt;
  return functional;
}

class NeuronInPlaceKernel final : public c10::OperatorKernel {
 public:
  NeuronInPlaceKernel(c10::SafeKernelFunction original, std::optional<c10::OperatorHandle> functional)
      : original_(std::move(original)), functional_(std::move(functional)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t num_args = op.schema().arguments().size();
    const size_t base = stack->size() - num_args;
    const bool writes_neuron = WritesNeuron((*stack)[base]);
    // A neuron-device self that is no functional wrapper (a tensor subclass's
    // wrapper, written with a neuron tensor) gets the checks too: PyTorch's
    // kernel would run the Python Meta kernel's instead of the CPU's.
    if (!writes_neuron && !OnNeuron((*stack)[base])) {
      original_.callBoxed(op, ks, stack);
      return;
    }
    // The CPU's overlap checks of self against the other arguments.
    if ((*stack)[base].isTensor()) CheckWrittenOverlap(op, *stack, base, (*stack)[base].toTensor());
    {
      // Neuron's checks where functionalization would run the op's Meta kernel.
      torch::jit::Stack meta_stack;
      meta_stack.reserve(num_args);
      const auto& arguments = op.schema().arguments();
      for (size_t i = base; i < stack->size(); ++i) {
        // Packed scalars (the foreach ops' `Tensor scalars`) are host values by
        // the op's contract: the checks see them as the CPU's kernel does.
        const bool host_values = arguments[i - base].name() == "scalars";
        meta_stack.push_back(host_values ? (*stack)[i] : MapTensors((*stack)[i], ToMeta));
      }
      at::AutoDispatchSkipFunctionalize skip;
      c10::impl::ExcludeDispatchKeyGuard exclude(kExcludedForMeta);
      std::optional<c10::impl::ForceDispatchKeyGuard> autograd_for_printing;
      if (torch::autograd::ForwardADLevel::try_get_by_idx(0) != nullptr) {
        // With a dual level open, a Python Meta kernel's overload resolution
        // prints its meta arguments, and printing asks for their primals
        // (_fw_primal), which have no kernel below autograd: there the meta
        // copies keep autograd (they carry no tangent; it only forwards).
        const c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
        autograd_for_printing.emplace(local.included_,
                                      local.excluded_ - c10::autograd_dispatch_keyset_with_ADInplaceOrView);
      }
      RunNeuronMeta(op, &meta_stack);
    }
    if (!writes_neuron || !functional_) {
      original_.callBoxed(op, ks, stack);  // its meta reference runs the op's own Meta kernel
      return;
    }
    // What functionalization's kernel does after its meta reference: the
    // functional form on the unwrapped values, written back into the wrappers.
    const c10::IValue written = (*stack)[base];
    for (size_t i = base; i < stack->size(); ++i) (*stack)[i] = MapTensors((*stack)[i], Unwrap);
    {
      at::AutoDispatchSkipFunctionalize skip;
      functional_->callBoxed(stack);
    }
    const c10::IValue result = stack->back();
    stack->pop_back();
    if (written.isTensor()) {
      Update(written.toTensor(), result.toTensor());
      stack->push_back(written);
    } else {
      const std::vector<at::Tensor> selves = written.toTensorVector();
      const std::vector<at::Tensor> results = result.toTensorVector();
      TORCH_INTERNAL_ASSERT(selves.size() == results.size());
      for (size_t i = 0; i < selves.size(); ++i) Update(selves[i], results[i]);
    }
  }

 private:
  // Whether the written argument is a functional neuron tensor (all of a
  // list's must be, for a neuron call).
  static bool OnNeuron(const c10::IValue& written) {
    return written.isTensor() && written.toTensor().defined() && IsNeuron(written.toTensor());
  }

  static bool WritesNeuron(const c10::IValue& written) {
    auto neuron = [](const at::Tensor& t) { return IsNeuron(t) && fimpl::isFunctionalTensor(t); };
    if (written.isTensor()) return neuron(written.toTensor());
    if (!written.isTensorList()) return false;
    const c10::List<at::Tensor> list = written.toTensorList();
    if (list.empty()) return false;
    for (const at::Tensor& t : list) {
      if (!neuron(t)) return false;
    }
    return true;
  }

  static void Update(const at::Tensor& self, const at::Tensor& value) {
    // An in-place write keeps the tensor's sizes: a value computed from a
    // tensor whose sizes came from data (a parameter's update by a gradient
    // of the picked rows) has sizes that did not, if the tensor's had not
    // (LazyTensor::size_from_data).
    LazyTensorPtr before = TryGetLazy(fimpl::from_functional_tensor(self));
    LazyTensorPtr after = TryGetLazy(value);
    if (before != nullptr && after != nullptr && !before->size_from_data()) after->ClearSizeFromData();
    fimpl::replace_(self, value);
    fimpl::commit_update(self);
    fimpl::sync(self);
  }

  c10::SafeKernelFunction original_;
  std::optional<c10::OperatorHandle> functional_;
};

struct State {
  std::mutex mu;
  absl::flat_hash_set<std::string> ops;
  absl::flat_hash_set<std::string> functional;
};

State& TheState() {
  static auto* state = new State();
  return *state;
}

std::string FullName(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

std::vector<std::string> Sorted(const absl::flat_hash_set<std::string>& set) {
  std::vector<std::string> names(set.begin(), set.end());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

bool IsInPlaceOp(const c10::OperatorHandle& op) {
  const auto& args = op.schema().arguments();
  if (args.empty() || args[0].is_out() || args[0].alias_info() == nullptr ||
      !args[0].alias_info()->isWrite()) {
    return false;
  }
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].alias_info() != nullptr) return false;
  }
  const c10::TypePtr& type = args[0].type();
  return type->kind() == c10::TypeKind::TensorType ||
         (type->kind() == c10::TypeKind::ListType &&
          type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType);
}

void RegisterNeuronInPlace(const c10::OperatorHandle& op) {
  State& s = TheState();
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string name = FullName(op);
  if (!IsInPlaceOp(op) || s.ops.contains(name)) return;
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) return;
  std::optional<c10::OperatorHandle> functional = FunctionalForm(op);
  // Registrations live as long as the process.
  static auto* library =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  SilenceOverrideWarnings silence;
  auto kernel = std::make_unique<NeuronInPlaceKernel>(
      op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize), functional);
  library->impl(name.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
  s.ops.insert(name);
  if (functional) s.functional.insert(name);
}

std::vector<std::string> NeuronInPlaceOps() {
  State& s = TheState();
  std::lock_guard<std::mutex> lock(s.mu);
  return Sorted(s.ops);
}

std::vector<std::string> NeuronInPlaceOpsRunFunctional() {
  State& s = TheState();
  std::lock_guard<std::mutex> lock(s.mu);
  return Sorted(s.functional);
}

}  // namespace torch_neuron::lazy

#include "lazy/out_checks.h"

#include <ATen/native/Resize.h>
#include <ATen/core/enum_tag.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/range.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/InferenceMode.h>
#include <torch/library.h>

#include <exception>
#include <memory>
#include <optional>
#include <utility>
#include <string>

#include "lazy/aten_ops.h"
#include "lazy/bridge.h"
#include "lazy/cpu_parity_rules.h"
#include "lazy/map_tensors.h"
#include "lazy/neuron_meta.h"
#include "ir/op_schema.h"

namespace torch_neuron::lazy {
namespace {

// The length of the sequence linspace, logspace, arange or range makes (their
// out= overloads), or nullopt for another op.
std::optional<int64_t> SequenceLength(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                      size_t base) {
  const std::string& name = op.schema().name();
  if (name == "aten::linspace" || name == "aten::logspace") return stack[base + 2].toInt();
  if (name == "aten::range") {
    // range.out(start, end, step=1, *, out) and range.out_(start, end, *, out)
    const bool has_step = op.schema().arguments().size() == 4;
    const c10::Scalar step = has_step ? stack[base + 2].toScalar() : c10::Scalar(1);
    return at::range(stack[base].toScalar(), stack[base + 1].toScalar(), step,
                     at::TensorOptions().device(c10::kMeta).dtype(at::kDouble))
        .numel();
  }
  if (name != "aten::arange") return std::nullopt;
  const bool from_zero = op.schema().arguments().size() == 2;  // arange.out(end, *, out)
  const c10::Scalar start = from_zero ? c10::Scalar(0) : stack[base].toScalar();
  const c10::Scalar end = stack[base + (from_zero ? 0 : 1)].toScalar();
  const c10::Scalar step = from_zero ? c10::Scalar(1) : stack[base + 2].toScalar();
  // The Meta kernel of the functional form counts as the CPU does (and checks
  // the step).
  return at::arange(start, end, step, at::TensorOptions().device(c10::kMeta).dtype(at::kDouble)).numel();
}

at::Tensor MetaCopy(const at::Tensor& t) {
  if (!t.defined() || !IsNeuron(t)) return t;  // CPU scalars stay as they are
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

c10::IValue MetaCopy(const c10::IValue& v) {
  if (v.isGenerator()) return c10::IValue();  // Meta kernels draw nothing
  return MapTensors(v, [](const at::Tensor& t) { return MetaCopy(t); });
}

// Whether a Meta kernel's failure says the inputs are wrong, rather than that
// Meta tensors cannot answer (no Meta kernel, a value read with item(), a
// data-dependent shape): only the former is the user's error.
bool IsInputError(const std::exception& e) {
  if (dynamic_cast<const c10::NotImplementedError*>(&e) != nullptr) return false;
  const std::string what = e.what();
  for (const char* unanswerable : {"meta tensor", "Meta tensor", "meta device", "Meta backend",
                                   "data-dependent", "data dependent", "NotImplementedError", "FakeTensor"}) {
    if (what.find(unanswerable) != std::string::npos) return false;
  }
  return true;
}

c10::IValue ToCpu(const c10::IValue& v) {
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) return c10::Device(c10::kCPU);
  return MapTensors(v, [](const at::Tensor& t) { return t.defined() && IsNeuron(t) ? t.cpu() : t; });
}

// Runs an out= op whose Meta kernel cannot say what it does (a data-dependent
// shape, no Meta kernel) as the CPU's kernel on CPU copies, and writes its
// results into the neuron outs: the CPU's checks, resizes and warnings. Those
// ops run on the CPU fallback anyway. False (nothing done) for ops that draw
// random numbers (they draw from the neuron generator on the usual path).
bool RunOnCpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t base) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[base + i];
    if (v.isGenerator() || ir::IsGeneratorType(schema.arguments()[i].type())) return false;
    if (schema.arguments()[i].is_out()) {
      if (!v.isTensor() || !IsNeuron(v.toTensor())) return false;
      outs.push_back(v.toTensor());
    }
  }
  if (outs.size() != schema.returns().size()) return false;
  torch::jit::Stack cpu_stack;
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[base + i];
    if (schema.arguments()[i].is_out()) {
      // The out as it is: its shape and dtype, which the CPU kernel checks and
      // resizes, and its values, which a kernel may read
      // (_compute_linear_combination adds into out).
      cpu_stack.push_back(v.toTensor().cpu());
    } else {
      cpu_stack.push_back(ToCpu(v));
    }
  }
  // The CPU kernel writes the CPU copies of the outs and of the other written
  // arguments (a batch norm's running stats).
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // neuron, CPU copy
  for (size_t i = 0; i < num_args; ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    const c10::IValue& v = (*stack)[base + i];
    if (alias != nullptr && alias->isWrite() && v.isTensor() && v.toTensor().defined() &&
        IsNeuron(v.toTensor())) {
      written.emplace_back(v.toTensor(), cpu_stack[i].toTensor());
    }
  }
  op.callBoxed(&cpu_stack);
  for (auto& [neuron, cpu] : written) {
    if (neuron.sizes() != cpu.sizes()) neuron.resize_(cpu.sizes());
    neuron.copy_(cpu);
  }
  torch::jit::drop(*stack, num_args);
  for (const at::Tensor& out : outs) stack->push_back(out);
  return true;
}

// The checks; `proceed()` then runs the op's next kernel on `stack`.
template <typename Proceed>
void CheckOut(const c10::OperatorHandle& op, torch::jit::Stack* stack, Proceed proceed) {
  const size_t num_args = op.schema().arguments().size();
  const size_t base = stack->size() - num_args;
  // The CPU's rules (cpu_parity_rules.h), in its order: autograd's refusal
  // of arguments that require grad; an out whose own elements share memory
  // (an expanded tensor); an out that overlaps an input (pow(x[1:], 2,
  // out=x[:-1]), cat into one of its inputs), where the CPU's kernel refuses it.
  CheckOutNoGrad(op, *stack, base);
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[base + i];
    if (op.schema().arguments()[i].is_out() && v.isTensor()) CheckNoInternalOverlap(v.toTensor());
  }
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& out = (*stack)[base + i];
    if (op.schema().arguments()[i].is_out() && out.isTensor())
      CheckWrittenOverlap(op, *stack, base, out.toTensor());
  }
  const std::string& name = op.schema().name();
  // linspace, logspace, arange and range resize out only where its element count
  // differs from the sequence's: an out of the right count keeps its shape and
  // takes the values in its logical order. (Their refs' Meta kernels resize by
  // shape, and warn: they are not asked.)
  const std::optional<int64_t> sequence = SequenceLength(op, *stack, base);
  if (sequence) {
    const at::Tensor out = stack->back().toTensor();
    if (name == "aten::arange" && out.numel() != *sequence) {
      TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
                 " which does not match the computed number of elements ", *sequence,
                 ". Note that this may occur as a result of rounding error. The out tensor will be resized "
                 "to a tensor of shape (",
                 *sequence, ",).");
    }
    if (out.numel() == *sequence && out.dim() != 1) {
      // Functionalization would give out the sequence's 1-d shape (and fail
      // writing through a view of another shape): the sequence goes to a
      // fresh tensor, copied in.
      stack->back() = at::empty({0}, out.options());
      proceed();
      const at::Tensor fresh = stack->back().toTensor();
      out.copy_(fresh.view(out.sizes()));
      stack->back() = out;
      return;
    }
  }
  if (!sequence) {
    torch::jit::Stack meta_stack;
    meta_stack.reserve(num_args);
    for (size_t i = base; i < stack->size(); ++i) meta_stack.push_back(MetaCopy((*stack)[i]));
    // The out tensors and their meta copies, which the Meta kernel resizes.
    std::vector<std::pair<size_t, at::Tensor>> meta_outs;
    for (size_t i = 0; i < num_args; ++i) {
      const c10::IValue& v = meta_stack[i];
      if (op.schema().arguments()[i].is_out() && v.isTensor() && v.toTensor().defined()) {
        meta_outs.emplace_back(i, v.toTensor());
      }
    }
    // An op of several outs gets empty stand-ins for them, which its Meta
    // kernel resizes without a warning: a Python Meta kernel (out_wrapper:
    // triangular_solve, the linalg ops) words its warning without the shape, so
    // Python's warning filter showed one message for two outs. The CPU's
    // warning is given below, per out, in the CPU's words. (An op of one out
    // keeps its copy: the CPU-parity cache keys on the out's shape.)
    const bool stand_ins = meta_outs.size() > 1;
    if (stand_ins) {
      for (auto& [i, meta] : meta_outs) {
        if (!meta.is_meta()) continue;
        meta = at::empty({0}, meta.options());
        meta_stack[i] = meta;
      }
    }
    try {
      RunNeuronMeta(op, &meta_stack);
      for (const auto& [i, meta] : meta_outs) {
        if (stand_ins) at::native::resize_output_check(MetaCopy((*stack)[base + i].toTensor()), meta.sizes());
      }
      // The CPU resizes an out view over its base's storage (restrided, as
      // big as needed); functionalization cannot re-point a view, and writing
      // the result through the old view failed when the graph ran.
      for (const auto& [i, meta] : meta_outs) {
        const at::Tensor out = (*stack)[base + i].toTensor();
        CheckOutViewNotResized(op, i, out, out.is_view() && IsNeuron(out), meta.sizes());
      }
    } catch (const std::exception& e) {
      if (!IsInputError(e)) {
        // Meta tensors cannot answer: the CPU's kernel does.
        if (RunOnCpu(op, stack, base)) return;
      } else if (!RaiseCastErrorAsCpu(name, e.what())) {
        throw;
      }
    }
  }
  proceed();
}

// At AutogradPrivateUse1 (the keys after autograd's come next).
void CheckedOut(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  CheckOut(op, stack, [&] { op.redispatchBoxed(ks & c10::after_autograd_keyset, stack); });
}

bool HasNeuronTensor(const torch::jit::Stack& stack, size_t base) {
  for (size_t i = base; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && v.toTensor().defined() && IsNeuron(v.toTensor())) return true;
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (t.defined() && IsNeuron(t)) return true;
      }
    }
  }
  return false;
}

// inference_mode skips the autograd keys, so there a neuron call meets
// functionalization first: the same checks run in its kernel, for neuron calls
// in inference mode only; every other call goes on to the kernel that was there.
class InferenceModeOutChecks final : public c10::OperatorKernel {
 public:
  explicit InferenceModeOutChecks(c10::SafeKernelFunction original) : original_(std::move(original)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t base = stack->size() - op.schema().arguments().size();
    if (c10::InferenceMode::is_enabled() && HasNeuronTensor(*stack, base)) {
      CheckOut(op, stack, [&] { original_.callBoxed(op, ks, stack); });
      return;
    }
    original_.callBoxed(op, ks, stack);
  }

 private:
  c10::SafeKernelFunction original_;
};

// A composite out= kernel (CompositeImplicitAutograd) may, for tensors it
// counts as subclasses (isTensorSubclassLike: a functional wrapper, so every
// neuron tensor), compute a new tensor and rebind its own reference to `out`
// instead of writing into it: linalg_matrix_rank(out=) returned the rank and
// left `out` as it was. On the CPU the same kernel writes `out`. After the
// kernel, an out= argument whose return is another tensor takes that result
// as the CPU's kernel gives it (resized as resize_output does, then copied)
// and is returned in its place.
void CallWritingBack(const c10::SafeKernelFunction& kernel, const c10::OperatorHandle& op,
                     c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t base = stack->size() - args.size();
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].is_out() && (*stack)[base + i].isTensor()) outs.push_back((*stack)[base + i].toTensor());
  }
  kernel.callBoxed(op, ks, stack);
  const size_t returns = op.schema().returns().size();
  if (outs.size() != returns || stack->size() < returns) return;
  const size_t first = stack->size() - returns;
  for (size_t k = 0; k < returns; ++k) {
    c10::IValue& ret = (*stack)[first + k];
    at::Tensor& out = outs[k];
    if (!ret.isTensor() || !out.defined() ||
        ret.toTensor().unsafeGetTensorImpl() == out.unsafeGetTensorImpl()) {
      continue;
    }
    const at::Tensor result = ret.toTensor();
    at::native::resize_output(out, result.sizes());
    out.copy_(result);
    ret = out;
  }
}

// At AutogradPrivateUse1: the composite kernel, its outs written back.
class CompositeOutWriteBack final : public c10::OperatorKernel {
 public:
  explicit CompositeOutWriteBack(c10::SafeKernelFunction composite) : composite_(std::move(composite)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    CallWritingBack(composite_, op, ks, stack);
  }

 private:
  c10::SafeKernelFunction composite_;
};

// At Functionalize: inference_mode skips the autograd keys, so a neuron call
// of a composite out= op met functionalization's fallback, which refuses an op
// returning an alias of its input ("Found a custom (non-ATen) operator whose
// output has alias annotations"); the CPU runs the composite. For neuron calls
// in inference mode the composite runs here, as at AutogradPrivateUse1; every
// other call goes on to the kernel that was there.
class CompositeOutInInferenceMode final : public c10::OperatorKernel {
 public:
  CompositeOutInInferenceMode(c10::SafeKernelFunction original, c10::SafeKernelFunction composite)
      : original_(std::move(original)), composite_(std::move(composite)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t base = stack->size() - op.schema().arguments().size();
    if (c10::InferenceMode::is_enabled() && HasNeuronTensor(*stack, base)) {
      CallWritingBack(composite_, op, ks, stack);
      return;
    }
    original_.callBoxed(op, ks, stack);
  }

 private:
  c10::SafeKernelFunction original_;
  c10::SafeKernelFunction composite_;
};

}  // namespace

int RegisterOutChecks() {
  static int registered = [] {
    auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradPrivateUse1,
                                   __FILE__, __LINE__);
    auto* functionalize =
        new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
    int count = 0;
    ForEachAtenOp([&](const c10::OperatorHandle& op, const std::string& overload) {
      bool out_fn = false;
      for (const c10::Argument& arg : op.schema().arguments()) out_fn |= arg.is_out();
      if (!out_fn) return;
      // A composite decomposes into ops that are checked themselves (an op
      // without a Meta kernel runs as the CPU's kernel: RunOnCpu); what it
      // returns is written into its out= arguments if it did not write them.
      if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
        SilenceOverrideWarnings silence;
        c10::SafeKernelFunction composite =
            op.getComputedKernelForDispatchKey(c10::DispatchKey::AutogradPrivateUse1);
        lib->impl(overload.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                        std::make_unique<CompositeOutWriteBack>(composite)));
        functionalize->impl(
            overload.c_str(),
            torch::CppFunction::makeFromBoxedFunctor(std::make_unique<CompositeOutInInferenceMode>(
                op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize), composite)));
        return;
      }
      lib->impl(overload.c_str(), torch::CppFunction::makeFromBoxedFunction<&CheckedOut>());
      if (op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) {
        SilenceOverrideWarnings silence;
        functionalize->impl(overload.c_str(),
                            torch::CppFunction::makeFromBoxedFunctor(std::make_unique<InferenceModeOutChecks>(
                                op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize))));
      }
      ++count;
    });
    return count;
  }();
  return registered;
}

}  // namespace torch_neuron::lazy

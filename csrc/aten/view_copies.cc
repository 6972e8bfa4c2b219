#include "aten/view_copies.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <optional>
#include <utility>

#include "lazy/bridge.h"

namespace torch_neuron::aten {
namespace {

// View ops whose *_copy forms are plain strided copies (sparse, nested and
// complex-view forms keep functionalization's generic handling).
constexpr const char* kViews[] = {
    "alias",     "as_strided", "detach",           "diagonal", "expand", "narrow",    "permute", "select",
    "slice",     "split",      "split_with_sizes", "squeeze",  "t",      "transpose", "unbind",  "unfold",
    "unsqueeze", "view",       "_reshape_alias"};

bool IsNeuronValue(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().defined() && lazy::IsNeuron(value.toTensor());
  if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) {
      if (t.defined() && lazy::IsNeuron(t)) return true;
    }
  }
  return false;
}

at::Tensor Contiguous(const at::Tensor& t) { return t.clone(at::MemoryFormat::Contiguous); }

// The CPU's out= convention: a wrong-sized out is resized (the deprecation
// warning for a non-empty one comes from the out= checks at the call).
void CopyInto(const at::Tensor& out, const at::Tensor& value) {
  if (out.sizes() != value.sizes()) out.resize_(value.sizes());
  out.copy_(value);
}

class ViewCopyKernel final : public c10::OperatorKernel {
 public:
  ViewCopyKernel(c10::SafeKernelFunction original, c10::OperatorHandle view, bool out)
      : original_(std::move(original)), view_(std::move(view)), out_(out) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t num_args = op.schema().arguments().size();
    bool neuron = false;
    for (size_t i = stack->size() - num_args; i < stack->size() && !neuron; ++i)
      neuron = IsNeuronValue((*stack)[i]);
    if (!neuron) {
      original_.callBoxed(op, ks, stack);
      return;
    }
    std::optional<c10::IValue> out;
    if (out_) {  // out= is the last argument (keyword-only)
      out = std::move(stack->back());
      stack->pop_back();
    }
    view_.callBoxed(stack);  // from the top: functionalization replays the view
    const c10::IValue result = std::move(stack->back());
    stack->pop_back();
    if (result.isTensor()) {
      const at::Tensor value = Contiguous(result.toTensor());
      if (!out) {
        stack->emplace_back(value);
        return;
      }
      CopyInto(out->toTensor(), value);
      stack->push_back(std::move(*out));
      return;
    }
    const std::vector<at::Tensor> views = result.toTensorVector();
    if (!out) {
      std::vector<at::Tensor> values;
      values.reserve(views.size());
      for (const at::Tensor& v : views) values.push_back(Contiguous(v));
      stack->emplace_back(std::move(values));
      return;
    }
    const std::vector<at::Tensor> outs = out->toTensorVector();
    TORCH_CHECK(outs.size() == views.size(), op.schema().name().substr(6),
                "() expected an out= argument of size ", views.size(), ", got size ", outs.size());
    for (size_t i = 0; i < views.size(); ++i) CopyInto(outs[i], Contiguous(views[i]));
  }

 private:
  c10::SafeKernelFunction original_;
  c10::OperatorHandle view_;
  bool out_;
};

}  // namespace

std::vector<std::string> RegisterViewCopies(torch::Library& library) {
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  std::vector<std::string> registered;
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    for (const char* view_name : kViews) {
      if (name.name != std::string("aten::") + view_name + "_copy") continue;
      const std::string& overload = name.overload_name;
      const bool out =
          overload == "out" || (overload.size() > 4 && overload.substr(overload.size() - 4) == "_out");
      const std::string view_overload = !out                ? overload
                                        : overload == "out" ? ""
                                                            : overload.substr(0, overload.size() - 4);
      std::optional<c10::OperatorHandle> view =
          dispatcher.findOp(c10::OperatorName(std::string("aten::") + view_name, view_overload));
      std::optional<c10::OperatorHandle> copy = dispatcher.findOp(name);
      if (!view || !copy) continue;
      const std::string full = overload.empty() ? name.name : name.name + "." + overload;
      library.impl(full.substr(6).c_str(),
                   torch::CppFunction::makeFromBoxedFunctor(std::make_unique<ViewCopyKernel>(
                       copy->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize), *view, out)));
      registered.push_back(full);
    }
  }
  return registered;
}

}  // namespace torch_neuron::aten

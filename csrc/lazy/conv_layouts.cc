#include "lazy/conv_layouts.h"

#include <ATen/core/grad_mode.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/empty.h>
#include <c10/core/MemoryFormat.h>

#include <optional>
#include <vector>

namespace torch_neuron::lazy {
namespace {

const c10::IValue* Arg(const c10::FunctionSchema& schema, const torch::jit::Stack& args, const char* name) {
  std::optional<int> index = schema.argumentIndexWithName(name);
  return index && static_cast<size_t>(*index) < args.size() ? &args[*index] : nullptr;
}

// A CPU tensor with `t`'s dtype, sizes and strides (as `t` reports them) and
// no storage: backend selection reads metadata only, and the call's tensors
// may be large. nullopt where `t` has symbolic sizes.
// It requires grad where `t` does (with `need_grad`, where it may): the CPU's
// forward avoids NNPACK when a backward will follow.
std::optional<at::Tensor> StandIn(const at::Tensor& t, bool need_grad) {
  if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return std::nullopt;
  at::Tensor s = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(c10::kCPU));
  s.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides());
  if ((need_grad || t.requires_grad()) &&
      (c10::isFloatingType(t.scalar_type()) || c10::isComplexType(t.scalar_type()))) {
    s.set_requires_grad(true);
  }
  return s;
}

// A 3-d (conv1d) call's operands and parameters as the CPU kernel widens them
// to 2-d before choosing a backend: the input made contiguous and, like the
// weight, given a unit height; the parameters given a unit (or zero) first
// entry. Also what the backward kernel chooses from.
struct ConvCall {
  at::Tensor input;
  at::Tensor weight;
  std::vector<c10::SymInt> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
  bool one_d = false;
};

std::vector<c10::SymInt> SymInts(const c10::IValue* v) {
  std::vector<c10::SymInt> out;
  if (v == nullptr || !v->isIntList()) return out;
  for (int64_t i : v->toIntVector()) out.emplace_back(i);
  return out;
}

std::optional<ConvCall> ReadCall(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                                 bool backward) {
  const c10::IValue* input = Arg(schema, args, "input");
  const c10::IValue* weight = Arg(schema, args, "weight");
  const c10::IValue* transposed = Arg(schema, args, "transposed");
  const c10::IValue* groups = Arg(schema, args, "groups");
  if (input == nullptr || weight == nullptr || !input->isTensor() || !weight->isTensor() ||
      transposed == nullptr || !transposed->isBool() || groups == nullptr || !groups->isInt()) {
    return std::nullopt;
  }
  std::optional<at::Tensor> in = StandIn(input->toTensor(), backward);
  std::optional<at::Tensor> w = StandIn(weight->toTensor(), backward);
  if (!in || !w || in->dim() != w->dim() || in->dim() < 3 || in->dim() > 5) return std::nullopt;
  ConvCall call;
  call.stride = SymInts(Arg(schema, args, "stride"));
  call.padding = SymInts(Arg(schema, args, "padding"));
  call.dilation = SymInts(Arg(schema, args, "dilation"));
  call.output_padding = SymInts(Arg(schema, args, "output_padding"));
  call.transposed = transposed->toBool();
  call.groups = groups->toInt();
  if (in->dim() == 3) {
    call.one_d = true;
    // The CPU kernel copies a 3-d input contiguous before widening it.
    std::vector<int64_t> sizes = in->sizes().vec();
    sizes.insert(sizes.begin() + 2, 1);
    const bool grad = in->requires_grad();
    in = at::empty({0}, in->options());
    in->unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
    if (grad) in->set_requires_grad(true);
    // unsqueeze(2)'s geometry, set directly: a view of a stand-in would be
    // checked against its empty storage.
    std::vector<int64_t> w_sizes = w->sizes().vec();
    std::vector<int64_t> w_strides = w->strides().vec();
    w_strides.insert(w_strides.begin() + 2, w_sizes[2] * w_strides[2]);
    w_sizes.insert(w_sizes.begin() + 2, 1);
    const bool w_grad = w->requires_grad();
    w = at::empty({0}, w->options());
    w->unsafeGetTensorImpl()->set_sizes_and_strides(w_sizes, w_strides);
    if (w_grad) w->set_requires_grad(true);
    auto widen = [](std::vector<c10::SymInt>& v, int64_t first) {
      if (v.size() == 1) v.insert(v.begin(), c10::SymInt(first));
    };
    widen(call.stride, 1);
    widen(call.padding, 0);
    widen(call.dilation, 1);
    widen(call.output_padding, 0);
  }
  call.input = *in;
  call.weight = *w;
  return call;
}

// The memory format the CPU's backend for `call` lays its results out in.
// `backward`: the choice of the backward kernel, which always needs one.
std::optional<c10::MemoryFormat> BackendFormat(const ConvCall& call, bool backward) {
  const std::vector<c10::SymInt> output_padding =
      call.output_padding.empty() ? std::vector<c10::SymInt>(call.stride.size(), c10::SymInt(0))
                                  : call.output_padding;
  at::native::ConvBackend backend;
  std::optional<at::AutoGradMode> grad_mode;
  if (backward) grad_mode.emplace(true);
  try {
    backend = at::native::select_conv_backend(call.input, call.weight, std::nullopt, call.stride,
                                              call.padding, call.dilation, call.transposed, output_padding,
                                              c10::SymInt(call.groups), std::nullopt);
  } catch (const std::exception&) {
    return std::nullopt;  // arguments the kernel refuses: its own checks speak
  }
  if (backend == at::native::ConvBackend::Empty) return std::nullopt;
  return at::native::_determine_backend_memory_format(call.input, call.weight, backend);
}

// The layout of a result of `sizes` in `format`; a conv1d's result is laid out
// as its unit-height 2-d form and loses that dim.
TensorLayout LayoutIn(c10::MemoryFormat format, c10::IntArrayRef sizes, bool one_d) {
  if (format == c10::MemoryFormat::Contiguous) return {};
  std::vector<int64_t> wide = sizes.vec();
  if (one_d) wide.insert(wide.begin() + 2, 1);
  std::vector<int64_t> strides = format == c10::MemoryFormat::ChannelsLast3d
                                     ? c10::get_channels_last_strides_3d(wide)
                                     : c10::get_channels_last_strides_2d(wide);
  if (one_d) strides.erase(strides.begin() + 2);
  return TensorLayout::From(sizes, strides, 0);
}

// The call read from `args` and the memory format the CPU's backend gives its
// results; nullopt where the Meta kernel's answer stands.
std::optional<c10::MemoryFormat> CallAndFormat(const c10::FunctionSchema& schema,
                                               const torch::jit::Stack& args, bool backward,
                                               std::optional<ConvCall>* call) {
  *call = ReadCall(schema, args, backward);
  if (!*call) return std::nullopt;
  return BackendFormat(**call, backward);
}

}  // namespace

void CpuConvolutionLayout(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                          MetaResult* result) {
  if (result->shapes.size() != 1) return;
  std::optional<ConvCall> call;
  std::optional<c10::MemoryFormat> format = CallAndFormat(schema, args, /*backward=*/false, &call);
  if (!format) return;
  result->layouts[0] = LayoutIn(*format, result->shapes[0].sizes(), call->one_d);
}

void CpuConvolutionBackwardLayout(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                                  MetaResult* result) {
  if (result->shapes.size() != 3) return;
  std::optional<ConvCall> call;
  std::optional<c10::MemoryFormat> format = CallAndFormat(schema, args, /*backward=*/true, &call);
  if (!format) return;
  for (size_t i = 0; i < 2; ++i) {
    if (result->shapes[i].dtype() == c10::ScalarType::Undefined) continue;
    result->layouts[i] = LayoutIn(*format, result->shapes[i].sizes(), call->one_d);
  }
}

}  // namespace torch_neuron::lazy

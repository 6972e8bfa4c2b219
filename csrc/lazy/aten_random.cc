// Random kernels that PyTorch gives no Generator argument. native_dropout (what
// F.dropout calls on accelerators) draws from the CPU's default generator inside
// its kernel; here it is rewritten, as the CPU kernel computes it, from ops that
// take the neuron generator: a Bernoulli mask drawn in trace order from the
// device stream, then input * mask * 1/(1-p). So dropout follows
// torch.manual_seed and the device generator's state, and draws the masks a CPU
// run with the same seed draws.
#include <ATen/ops/bernoulli.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/min.h>
#include <ATen/ops/clone.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <c10/util/Exception.h>
#include <ATen/ops/ones_like.h>

#include <tuple>

#include "lazy/aten_random.h"
#include "lazy/tracer.h"

namespace torch_neuron::lazy {

std::tuple<at::Tensor, at::Tensor> NativeDropout(const at::Tensor& input, double p,
                                                 std::optional<bool> train) {
  const auto bool_options = input.options().dtype(at::kBool);
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) return {at::clone(input), at::ones_like(input, bool_options)};
  const double keep = 1.0 - p;
  const double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::bernoulli(at::empty_like(input, bool_options), keep);
  at::Tensor output = at::mul(at::mul(input, mask), scale);
  return {output, mask};
}

void NormalWithStdTensor(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t base = stack->size() - arguments.size();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& v = (*stack)[base + i];
    if (arguments[i].name() != "std" || !v.isTensor()) continue;
    const at::Tensor& std = v.toTensor();
    TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
    TORCH_CHECK(std.numel() == 0 || at::min(std).ge(0).item<bool>(),
                "normal expects all elements of std >= 0.0");
  }
  TraceOp(op, stack);
}

}  // namespace torch_neuron::lazy

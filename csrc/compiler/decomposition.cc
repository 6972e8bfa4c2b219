#include "compiler/decomposition.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include <c10/util/accumulate.h>

namespace torch_neuron::compiler {
namespace {

using Input = NodeBuilder::Input;

// The value feeding argument `a` of `n`, if it is a float32 tensor operand.
std::optional<ValueRef> FloatOperand(const CompileNode& n, const NodeBuilder& b, size_t a) {
  if (a >= n.args.size() || n.args[a].kind != ir::Arg::Kind::kOperand) return std::nullopt;
  const ValueRef v = n.operands[n.args[a].operands[0]];
  const ir::Shape& shape = b.ShapeOf(v);
  if (shape.dtype() != c10::ScalarType::Float || shape.sizes().empty() || shape.numel() == 0)
    return std::nullopt;
  return v;
}

// The attribute of argument `a`, or None.
c10::IValue Attr(const CompileNode& n, size_t a) {
  const ir::Arg& arg = n.args.at(a);
  return arg.kind == ir::Arg::Kind::kAttr ? arg.attr : c10::IValue();
}

// Builds the decomposition of one node: ops traced from the node's source line,
// with reductions over the trailing dims from `split` on.
class Decomposer {
 public:
  Decomposer(const CompileNode& n, NodeBuilder& b, const ir::Shape& full, int split)
      : n_(n), b_(b), full_(full), split_(split) {
    dims_.resize(full.sizes().size() - split);
    std::iota(dims_.begin(), dims_.end(), split);
    std::vector<int64_t> row(full.sizes().begin(), full.sizes().begin() + split);
    row.resize(full.sizes().size(), 1);
    row_ = ir::Shape(c10::ScalarType::Float, row);
  }
  const ir::Shape& row_shape() const { return row_; }

  ValueRef Reduce(const std::string& op, ValueRef x, bool keepdim = true) {
    std::vector<Input> inputs = {x, c10::IValue(dims_), c10::IValue(keepdim)};
    if (op != "aten::amax" && op != "aten::amin") inputs.emplace_back(c10::IValue());  // dtype
    std::vector<int64_t> row(full_.sizes().begin(), full_.sizes().begin() + split_);
    return b_.Op(op, inputs, keepdim ? row_ : ir::Shape(c10::ScalarType::Float, row), n_.source);
  }
  int64_t RowLength() const {
    return c10::multiply_integers(full_.sizes().begin() + split_, full_.sizes().end());
  }
  ValueRef Unary(const std::string& op, ValueRef x) { return b_.Op(op, {x}, b_.ShapeOf(x), n_.source); }
  // add/sub.Tensor (alpha 1), mul/div.Tensor, with the shape of the first operand
  // or, when it is a row value, of the second (broadcasting).
  ValueRef Binary(const std::string& op, ValueRef x, ValueRef y) {
    const ir::Shape& shape = b_.ShapeOf(x).sizes() == full_.sizes() ? b_.ShapeOf(x) : b_.ShapeOf(y);
    std::vector<Input> inputs = {x, y};
    if (op == "aten::add.Tensor" || op == "aten::sub.Tensor") inputs.emplace_back(b_.One());
    return b_.Op(op, inputs, shape, n_.source);
  }
  // The sum over the dims before the row: one value per row position.
  ValueRef ColumnSum(ValueRef x) {
    std::vector<int64_t> lead(split_);
    std::iota(lead.begin(), lead.end(), 0);
    const std::vector<int64_t> trailing(full_.sizes().begin() + split_, full_.sizes().end());
    return b_.Op("aten::sum.dim_IntList", {x, c10::IValue(lead), c10::IValue(false), c10::IValue()},
                 ir::Shape(c10::ScalarType::Float, trailing), n_.source);
  }
  ValueRef AddScalar(ValueRef x, double value) {
    return b_.Op("aten::add.Scalar", {x, c10::IValue(value), b_.One()}, b_.ShapeOf(x), n_.source);
  }
  ValueRef DivScalar(ValueRef x, double value) {
    return b_.Op("aten::div.Scalar", {x, c10::IValue(value)}, b_.ShapeOf(x), n_.source);
  }

 private:
  const CompileNode& n_;
  NodeBuilder& b_;
  ir::Shape full_;
  int split_;
  std::vector<int64_t> dims_;
  ir::Shape row_;
};

// The dim attribute of argument `a` if it names the last dim of `shape`.
bool LastDim(const CompileNode& n, size_t a, const ir::Shape& shape) {
  const c10::IValue dim = Attr(n, a);
  if (!dim.isInt()) return false;
  const int64_t rank = static_cast<int64_t>(shape.sizes().size());
  return dim.toInt() == rank - 1 || dim.toInt() == -1;
}

std::optional<std::vector<ValueRef>> Softmax(const CompileNode& n, NodeBuilder& b, bool log) {
  std::optional<ValueRef> x = FloatOperand(n, b, 0);
  if (!x || !LastDim(n, 1, b.ShapeOf(*x)) || !Attr(n, 2).isBool() || Attr(n, 2).toBool()) return std::nullopt;
  Decomposer d(n, b, b.ShapeOf(*x), static_cast<int>(b.ShapeOf(*x).sizes().size()) - 1);
  const ValueRef shifted = d.Binary("aten::sub.Tensor", *x, d.Reduce("aten::amax", *x));
  const ValueRef e = d.Unary("aten::exp", shifted);
  const ValueRef sum = d.Reduce("aten::sum.dim_IntList", e);
  if (log) return std::vector<ValueRef>{d.Binary("aten::sub.Tensor", shifted, d.Unary("aten::log", sum))};
  // One reciprocal per row and a multiply per element, as ATen's kernel does.
  return std::vector<ValueRef>{d.Binary("aten::mul.Tensor", e, d.Unary("aten::reciprocal", sum))};
}

// _safe_softmax(self, dim, dtype) (attention's softmax): softmax, except that a
// row of -inf only gives zeros, not NaN.
std::optional<std::vector<ValueRef>> SafeSoftmax(const CompileNode& n, NodeBuilder& b) {
  std::optional<ValueRef> x = FloatOperand(n, b, 0);
  if (!x || !LastDim(n, 1, b.ShapeOf(*x)) || !Attr(n, 2).isNone()) return std::nullopt;
  Decomposer d(n, b, b.ShapeOf(*x), static_cast<int>(b.ShapeOf(*x).sizes().size()) - 1);
  const ValueRef max = d.Reduce("aten::amax", *x);
  const ValueRef e = d.Unary("aten::exp", d.Binary("aten::sub.Tensor", *x, max));
  const ValueRef out =
      d.Binary("aten::mul.Tensor", e, d.Unary("aten::reciprocal", d.Reduce("aten::sum.dim_IntList", e)));
  const ir::Shape flags(c10::ScalarType::Bool, d.row_shape().sizes());
  const ValueRef empty =
      b.Op("aten::eq.Scalar", {max, c10::IValue(-std::numeric_limits<double>::infinity())}, flags, n.source);
  return std::vector<ValueRef>{
      b.Op("aten::masked_fill.Scalar", {out, empty, c10::IValue(0.0)}, b.ShapeOf(out), n.source)};
}

// _softmax_backward_data / _log_softmax_backward_data(grad, output, dim, input_dtype).
std::optional<std::vector<ValueRef>> SoftmaxBackward(const CompileNode& n, NodeBuilder& b, bool log) {
  std::optional<ValueRef> grad = FloatOperand(n, b, 0), out = FloatOperand(n, b, 1);
  if (!grad || !out || b.ShapeOf(*grad).sizes() != b.ShapeOf(*out).sizes() ||
      !LastDim(n, 2, b.ShapeOf(*out)) || !Attr(n, 3).isInt() ||
      Attr(n, 3).toInt() != static_cast<int64_t>(c10::ScalarType::Float)) {
    return std::nullopt;
  }
  Decomposer d(n, b, b.ShapeOf(*out), static_cast<int>(b.ShapeOf(*out).sizes().size()) - 1);
  if (log) {
    // grad - exp(output) * sum(grad)
    const ValueRef sum = d.Reduce("aten::sum.dim_IntList", *grad);
    return std::vector<ValueRef>{
        d.Binary("aten::sub.Tensor", *grad, d.Binary("aten::mul.Tensor", d.Unary("aten::exp", *out), sum))};
  }
  // output * (grad - sum(grad * output))
  const ValueRef sum = d.Reduce("aten::sum.dim_IntList", d.Binary("aten::mul.Tensor", *grad, *out));
  return std::vector<ValueRef>{d.Binary("aten::mul.Tensor", *out, d.Binary("aten::sub.Tensor", *grad, sum))};
}

// var.correction / std.correction(self, dim, correction, keepdim) over the
// trailing dims (or all), the correction a constant (0 or 1; None is 1): the mean, then
// the sum of squared deviations over max(0, N - correction), as ATen divides.
// (ATen accumulates float32 in float64; the row kernel's two float32 passes
// differ by rounding.)
std::optional<std::vector<ValueRef>> Variance(const CompileNode& n, NodeBuilder& b, bool root) {
  std::optional<ValueRef> x = FloatOperand(n, b, 0);
  const c10::IValue dims = Attr(n, 1), keepdim = Attr(n, 3);
  if (!x || !keepdim.isBool()) return std::nullopt;
  int64_t correction = 1;  // None: Bessel's correction
  if (n.args[2].kind == ir::Arg::Kind::kOperand) {
    const CompileNode& c = b.NodeOf(n.operands[n.args[2].operands[0]]);
    if (c.kind != ir::NodeKind::kConstant || !c.scalar.isIntegral(false)) return std::nullopt;
    correction = c.scalar.toLong();
  } else if (!Attr(n, 2).isNone()) {
    return std::nullopt;
  }
  const int64_t rank = static_cast<int64_t>(b.ShapeOf(*x).sizes().size());
  std::vector<int64_t> reduced;
  if (dims.isNone()) {
    reduced.resize(rank);
    std::iota(reduced.begin(), reduced.end(), 0);
  } else if (dims.isIntList()) {
    reduced = dims.toIntVector();
  } else {
    return std::nullopt;
  }
  for (int64_t& d : reduced) d = d < 0 ? d + rank : d;
  std::sort(reduced.begin(), reduced.end());
  for (size_t i = 0; i < reduced.size(); ++i) {
    if (reduced[i] != rank - static_cast<int64_t>(reduced.size() - i)) return std::nullopt;  // not trailing
  }
  if (reduced.empty()) return std::nullopt;
  Decomposer d(n, b, b.ShapeOf(*x), static_cast<int>(rank - reduced.size()));
  const ValueRef centered = d.Binary("aten::sub.Tensor", *x, d.Reduce("aten::mean.dim", *x));
  const ValueRef squares =
      d.Reduce("aten::sum.dim_IntList", d.Binary("aten::mul.Tensor", centered, centered), keepdim.toBool());
  if (b.ShapeOf(squares).sizes() != n.shape(0).sizes()) return std::nullopt;
  const int64_t divisor = std::max<int64_t>(0, d.RowLength() - correction);
  const ValueRef var = d.DivScalar(squares, static_cast<double>(divisor));
  return std::vector<ValueRef>{root ? d.Unary("aten::sqrt", var) : var};
}

// sum(self, dtype=None) and mean(self, dtype=None), the whole tensor: the same
// reductions over every dim, which fusion takes as a row kernel of one row (a
// loss written by hand, ((y - t) ** 2).mean()). amax/amin(self, dim=[]) too.
std::optional<std::vector<ValueRef>> WholeReduction(const CompileNode& n, NodeBuilder& b,
                                                    const std::string& op) {
  std::optional<ValueRef> x = FloatOperand(n, b, 0);
  if (!x || n.shape(0).dtype() != c10::ScalarType::Float) return std::nullopt;
  const bool extreme = op == "aten::amax" || op == "aten::amin";
  bool keepdim = false;
  if (extreme) {
    const c10::IValue dims = Attr(n, 1), keep = Attr(n, 2);
    if (!dims.isIntList() || !dims.toIntVector().empty() || !keep.isBool()) return std::nullopt;
    keepdim = keep.toBool();
  } else if (!Attr(n, 1).isNone()) {
    return std::nullopt;  // a dtype
  }
  Decomposer d(n, b, b.ShapeOf(*x), 0);
  return std::vector<ValueRef>{
      d.Reduce(extreme ? op : (op == "aten::sum" ? "aten::sum.dim_IntList" : "aten::mean.dim"), *x, keepdim)};
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
std::optional<std::vector<ValueRef>> LayerNorm(const CompileNode& n, NodeBuilder& b) {
  std::optional<ValueRef> x = FloatOperand(n, b, 0);
  const c10::IValue normalized = Attr(n, 1);
  const c10::IValue eps = Attr(n, 4);
  if (!x || !normalized.isIntList() || !eps.isDouble()) return std::nullopt;
  const std::vector<int64_t>& sizes = b.ShapeOf(*x).sizes();
  const std::vector<int64_t> trailing = normalized.toIntVector();
  if (trailing.empty() || trailing.size() > sizes.size() ||
      !std::equal(trailing.begin(), trailing.end(), sizes.end() - trailing.size())) {
    return std::nullopt;
  }
  Decomposer d(n, b, b.ShapeOf(*x), static_cast<int>(sizes.size() - trailing.size()));
  if (n.shape(1).sizes() != d.row_shape().sizes() || n.shape(2).sizes() != d.row_shape().sizes()) {
    return std::nullopt;
  }
  std::optional<ValueRef> weight, bias;
  for (size_t a : {2, 3}) {
    if (n.args[a].kind == ir::Arg::Kind::kAttr && Attr(n, a).isNone()) continue;
    std::optional<ValueRef> v = FloatOperand(n, b, a);
    if (!v || b.ShapeOf(*v).sizes() != trailing) return std::nullopt;
    (a == 2 ? weight : bias) = v;
  }
  const ValueRef mean = d.Reduce("aten::mean.dim", *x);
  const ValueRef centered = d.Binary("aten::sub.Tensor", *x, mean);
  const ValueRef var = d.Reduce("aten::mean.dim", d.Binary("aten::mul.Tensor", centered, centered));
  const ValueRef rstd = d.Unary("aten::rsqrt", d.AddScalar(var, eps.toDouble()));
  ValueRef out = d.Binary("aten::mul.Tensor", centered, rstd);
  if (weight) out = d.Binary("aten::mul.Tensor", out, *weight);
  if (bias) out = d.Binary("aten::add.Tensor", out, *bias);
  return std::vector<ValueRef>{out, mean, rstd};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
// weight, bias, output_mask) with weight, bias and every output wanted (the
// affine layer norm of nn.LayerNorm): grad_input in a row kernel, the weight
// and bias gradients as sums over rows (library calls).
std::optional<std::vector<ValueRef>> LayerNormBackward(const CompileNode& n, NodeBuilder& b) {
  std::optional<ValueRef> grad = FloatOperand(n, b, 0), x = FloatOperand(n, b, 1),
                          mean = FloatOperand(n, b, 3), rstd = FloatOperand(n, b, 4),
                          weight = FloatOperand(n, b, 5), bias = FloatOperand(n, b, 6);
  const c10::IValue normalized = Attr(n, 2), mask = Attr(n, 7);
  if (!grad || !x || !mean || !rstd || !weight || !bias || !normalized.isIntList() || !mask.isBoolList()) {
    return std::nullopt;
  }
  const std::vector<int64_t>& sizes = b.ShapeOf(*x).sizes();
  const std::vector<int64_t> trailing = normalized.toIntVector();
  const c10::List<bool> wanted = mask.toBoolList();
  if (trailing.empty() || trailing.size() >= sizes.size() || b.ShapeOf(*grad).sizes() != sizes ||
      !std::equal(trailing.begin(), trailing.end(), sizes.end() - trailing.size()) || wanted.size() != 3 ||
      !wanted[0] || !wanted[1] || !wanted[2] || b.ShapeOf(*weight).sizes() != trailing) {
    return std::nullopt;
  }
  Decomposer d(n, b, b.ShapeOf(*x), static_cast<int>(sizes.size() - trailing.size()));
  if (b.ShapeOf(*mean).sizes() != d.row_shape().sizes() ||
      b.ShapeOf(*rstd).sizes() != d.row_shape().sizes()) {
    return std::nullopt;
  }
  // x_hat = (x - mean) * rstd; g = grad * weight;
  // grad_input = rstd * (g - mean(g) - x_hat * mean(g * x_hat)).
  const ValueRef x_hat = d.Binary("aten::mul.Tensor", d.Binary("aten::sub.Tensor", *x, *mean), *rstd);
  const ValueRef g = d.Binary("aten::mul.Tensor", *grad, *weight);
  const ValueRef g_mean = d.Reduce("aten::mean.dim", g);
  const ValueRef gx_mean = d.Reduce("aten::mean.dim", d.Binary("aten::mul.Tensor", g, x_hat));
  const ValueRef inner = d.Binary("aten::sub.Tensor", d.Binary("aten::sub.Tensor", g, g_mean),
                                  d.Binary("aten::mul.Tensor", x_hat, gx_mean));
  const ValueRef grad_input = d.Binary("aten::mul.Tensor", inner, *rstd);
  const ValueRef grad_weight = d.ColumnSum(d.Binary("aten::mul.Tensor", *grad, x_hat));
  return std::vector<ValueRef>{grad_input, grad_weight, d.ColumnSum(*grad)};
}

}  // namespace

absl::StatusOr<bool> Decomposition::Run(CompileGraph& g) {
  return RewriteNodes(g, [](const CompileNode& n, NodeBuilder& b) -> std::optional<std::vector<ValueRef>> {
    const std::string& op = n.op;
    if (op == "aten::_softmax") return Softmax(n, b, false);
    if (op == "aten::_log_softmax") return Softmax(n, b, true);
    if (op == "aten::_safe_softmax") return SafeSoftmax(n, b);
    if (op == "aten::_softmax_backward_data") return SoftmaxBackward(n, b, false);
    if (op == "aten::_log_softmax_backward_data") return SoftmaxBackward(n, b, true);
    if (op == "aten::native_layer_norm") return LayerNorm(n, b);
    if (op == "aten::sum" || op == "aten::mean" || op == "aten::amax" || op == "aten::amin") {
      return WholeReduction(n, b, op);
    }
    if (op == "aten::var.correction") return Variance(n, b, false);
    if (op == "aten::std.correction") return Variance(n, b, true);
    if (op == "aten::native_layer_norm_backward") return LayerNormBackward(n, b);
    return std::nullopt;
  });
}

}  // namespace torch_neuron::compiler

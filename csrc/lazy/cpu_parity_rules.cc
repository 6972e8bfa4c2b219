#include "lazy/cpu_parity_rules.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/enum_tag.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "lazy/conv_layouts.h"

namespace torch_neuron::lazy {

// ---- Overlap ----------------------------------------------------------------

const char kOverlapMessage[] =
    "unsupported operation: more than one element of the written-to tensor refers to a single memory "
    "location. "
    "Please clone() the tensor before performing the operation.";

void CheckNoInternalOverlap(const at::Tensor& written) {
  if (!written.defined()) return;
  TORCH_CHECK(at::has_internal_overlap(written) != at::MemOverlap::Yes, kOverlapMessage);
}

void CheckInPlaceSelfOverlap(const std::string& op_name, const at::Tensor& self, bool refuse) {
  if (at::has_internal_overlap(self) != at::MemOverlap::Yes) return;
  TORCH_CHECK(!refuse, kOverlapMessage);
  // Functionalization's run of a write the CPU allows (fill_ of an expanded
  // tensor): its write-back would sum the copies of each element (expand's
  // inverse is a sum), a wrong result; refused instead.
  TORCH_CHECK_NOT_IMPLEMENTED(
      !c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize), op_name,
      ": writing into a tensor whose elements share memory (an expanded tensor) is not "
      "supported on lazy devices; write into the tensor it was expanded from, or clone() "
      "it first");
}

namespace {

// Kernels that refuse any overlap of the written tensor with an argument.
constexpr std::string_view kNoOverlap[] = {
    "aten::scatter_",   "aten::scatter_add_",     "aten::scatter_reduce_",
    "aten::index_put_", "aten::_index_put_impl_", "aten::index_copy_",
    "aten::index_add_", "aten::index_reduce_",    "aten::put_",
    "aten::cat",        "aten::concat",           "aten::concatenate",
    "aten::gather",     "aten::index_select",     "aten::take",
    "aten::scatter",    "aten::scatter_add",      "aten::scatter_reduce",
    "aten::index_copy", "aten::index_add",        "aten::index_reduce",
    "aten::put"};

// Elementwise kernels without the pointwise tag that refuse a partial overlap.
constexpr std::string_view kNoPartialOverlap[] = {"aten::where", "aten::cumsum", "aten::cumprod"};

enum class Rule { kNone, kPartial, kAny };

Rule FindRule(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  for (std::string_view n : kNoOverlap) {
    if (name == n) return Rule::kAny;
  }
  if (op.hasTag(at::Tag::pointwise)) return Rule::kPartial;
  for (std::string_view n : kNoPartialOverlap) {
    if (name == n) return Rule::kPartial;
  }
  return Rule::kNone;
}

// Per thread, by schema (operators live as long as the process).
Rule RuleOf(const c10::OperatorHandle& op) {
  thread_local absl::flat_hash_map<const c10::FunctionSchema*, Rule> rules;
  auto [it, fresh] = rules.try_emplace(&op.schema(), Rule::kNone);
  if (fresh) it->second = FindRule(op);
  return it->second;
}

// Tensors without addresses of their own: symbolic sizes (the fake tensors
// of a torch.compile trace with dynamic shapes; ATen's overlap test reads
// numel() and raises) and Python wrapper subclasses (their sizes come from
// Python, and their storage is a placeholder). The CPU's Meta kernels leave
// these unchecked too; the tensors they wrap, or the region's own trace on real
// tensors, are checked when the op reaches them.
bool Symbolic(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return impl->has_symbolic_sizes_strides() || impl->is_python_dispatch();
}

void Check(Rule rule, const at::Tensor& written, const at::Tensor& arg) {
  if (!arg.defined() || Symbolic(arg)) return;
  if (rule == Rule::kAny) {
    at::assert_no_overlap(written, arg);
  } else {
    at::assert_no_partial_overlap(written, arg);  // the same tensor in and out is fine
  }
}

}  // namespace

bool HasOverlapRule(const c10::OperatorHandle& op) { return RuleOf(op) != Rule::kNone; }

void CheckWrittenOverlap(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
                         const at::Tensor& written) {
  if (!written.defined() || Symbolic(written)) return;
  const Rule rule = RuleOf(op);
  if (rule == Rule::kNone) return;
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& v = stack[base + i];
    if (arguments[i].is_out()) continue;
    if (v.isTensor()) {
      if (i == 0 && v.toTensor().is_same(written)) continue;  // an in-place op's self
      Check(rule, written, v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) Check(rule, written, t);
    } else if (v.isList()) {  // index_put_'s Tensor?[] indices
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) Check(rule, written, e.toTensor());
      }
    }
  }
}

// ---- In-place: broadcast and cast --------------------------------------------

std::vector<int64_t> BroadcastShape(const std::vector<at::IntArrayRef>& shapes) {
  size_t rank = 0;
  for (at::IntArrayRef s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (at::IntArrayRef shape : shapes) {
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t& size = out[rank - shape.size() + i];
      if (size == 1) {
        size = shape[i];
      } else {
        TORCH_CHECK(shape[i] == 1 || shape[i] == size, "The size of tensor a (", size,
                    ") must match the size of tensor b (", shape[i], ") at non-singleton dimension ", i);
      }
    }
  }
  return out;
}

void CheckBroadcastToSelf(const at::Tensor& self, const std::vector<at::IntArrayRef>& operand_shapes) {
  if (operand_shapes.empty()) return;
  std::vector<at::IntArrayRef> shapes = {self.sizes()};
  shapes.insert(shapes.end(), operand_shapes.begin(), operand_shapes.end());
  const std::vector<int64_t> shape = BroadcastShape(shapes);
  TORCH_CHECK(self.sizes() == at::IntArrayRef(shape), "output with shape ", self.sizes(),
              " doesn't match the broadcast shape ", at::IntArrayRef(shape));
}

namespace {

std::string CastMessage(c10::ScalarType result, c10::ScalarType written) {
  return std::string("result type ") + c10::toString(result) + " can't be cast to the desired output type " +
         c10::toString(written);
}

// torch's Python name of a dtype ("float32") as c10's; nullopt for another word.
std::optional<c10::ScalarType> DtypeOfPythonName(absl::string_view name) {
  static const std::pair<const char*, c10::ScalarType> kNames[] = {{"float32", c10::kFloat},
                                                                   {"float64", c10::kDouble},
                                                                   {"float16", c10::kHalf},
                                                                   {"bfloat16", c10::kBFloat16},
                                                                   {"complex64", c10::kComplexFloat},
                                                                   {"complex128", c10::kComplexDouble},
                                                                   {"complex32", c10::kComplexHalf},
                                                                   {"uint8", c10::kByte},
                                                                   {"int8", c10::kChar},
                                                                   {"int16", c10::kShort},
                                                                   {"int32", c10::kInt},
                                                                   {"int64", c10::kLong},
                                                                   {"bool", c10::kBool},
                                                                   {"uint16", c10::kUInt16},
                                                                   {"uint32", c10::kUInt32},
                                                                   {"uint64", c10::kUInt64}};
  for (const auto& [n, dtype] : kNames) {
    if (name == n) return dtype;
  }
  return std::nullopt;
}

// The dtype named after `marker` in `what` ("...dtype torch.int64 but..."), or nullopt.
std::optional<c10::ScalarType> DtypeAfter(const std::string& what, const std::string& marker) {
  const size_t at = what.find(marker);
  if (at == std::string::npos) return std::nullopt;
  const size_t start = at + marker.size();
  const size_t end = what.find_first_of(" ,", start);
  return DtypeOfPythonName(absl::string_view(what).substr(
      start, end == std::string::npos ? absl::string_view::npos : end - start));
}

}  // namespace

void CheckCastToOutput(c10::ScalarType result, c10::ScalarType written) {
  TORCH_CHECK(c10::canCast(result, written), CastMessage(result, written));
}

std::string CpuCastMessage(const std::string& what) {
  if (what.find("but this can't be cast because it is not safe") == std::string::npos) return "";
  const std::optional<c10::ScalarType> from = DtypeAfter(what, "Attempting to cast from torch.");
  const std::optional<c10::ScalarType> to = DtypeAfter(what, "to out tensor with dtype torch.");
  if (!from || !to) return "";
  return CastMessage(*from, *to);
}

bool RaiseCastErrorAsCpu(const std::string& name, const std::string& what) {
  const std::string cpu = CpuCastMessage(what);
  if (cpu.empty()) return false;
  TORCH_CHECK_TYPE(name != "aten::cat", "torch.cat(): input types can't be cast to the desired output type ",
                   cpu.substr(cpu.rfind(' ') + 1));
  // The refs' out= wrapper refuses every unsafe cast; the CPU's bernoulli
  // writes its 0s and 1s into any dtype.
  TORCH_CHECK(name == "aten::bernoulli", cpu);
  return true;
}

// ---- out= ---------------------------------------------------------------------

namespace {

bool RequiresGrad(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() && v.toTensor().requires_grad();
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (RequiresGrad(e)) return true;
    }
  }
  return false;
}

}  // namespace

void CheckOutNoGrad(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base) {
  if (!c10::GradMode::is_enabled()) return;
  for (size_t i = base; i < stack.size(); ++i) {
    TORCH_CHECK(!RequiresGrad(stack[i]), op.schema().name().substr(6),
                "(): functions with out=... arguments don't support automatic differentiation, "
                "but one of the arguments requires grad.");
  }
}

void CheckOutViewNotResized(const c10::OperatorHandle& op, size_t arg, const at::Tensor& out,
                            bool is_neuron_view, at::IntArrayRef result_sizes) {
  TORCH_CHECK(!is_neuron_view || out.sizes() == result_sizes, op.schema().name().substr(6),
              "(): the out= argument '", op.schema().arguments()[arg].name(), "' is a view of shape ",
              out.sizes(), " that the result's shape ", result_sizes,
              " would resize; resizing a view is not supported on neuron (the CPU restrides it over "
              "its base's storage): pass an out of the result's shape, or one that is not a view");
}

std::optional<c10::ScalarType> ExactOutDtypeWanted(const std::string& what) {
  return DtypeAfter(what, "Expected out tensor to have dtype torch.");
}

// ---- foreach ------------------------------------------------------------------

void CheckForeachScalarTensor(const at::Tensor& scalar) {
  TORCH_CHECK(scalar.dim() == 0 && scalar.numel() == 1, "scalar tensor expected to be 0 dim but it has ",
              scalar.dim(), " dimensions and ", scalar.numel(), " elements.");
}

// ---- Meta fix-ups ---------------------------------------------------------------

namespace {

// Normalization ops' saved statistics (mean, invstd/rstd: outputs 1 and 2). The
// CPU kernels keep them in the input's dtype unless a parameter is float32 beside
// a reduced-precision input (mixed precision); the Meta kernels always say
// float32. Without batch statistics (eval) batch norm's CPU kernel returns them
// empty, where Meta gives the channel count.
void CpuNormStats(const c10::FunctionSchema& schema, const torch::jit::Stack& args, MetaResult* result) {
  if (result->shapes.size() < 3) return;
  auto arg = [&](const char* name) -> const c10::IValue* {
    std::optional<int> index = schema.argumentIndexWithName(name);
    return index && static_cast<size_t>(*index) < args.size() ? &args[*index] : nullptr;
  };
  const bool batch_norm = schema.name().find("batch_norm") != std::string::npos;
  const c10::IValue* training = arg("training");
  const bool eval =
      batch_norm && (training != nullptr ? training->isBool() && !training->toBool()
                                         : schema.name().find("no_training") != std::string::npos);
  const c10::ScalarType input = result->shapes[0].dtype();
  c10::ScalarType dtype = input;
  for (const char* param : {"weight", "bias", "running_mean", "running_var"}) {
    const c10::IValue* v = arg(param);
    if (v != nullptr && v->isTensor() && v->toTensor().scalar_type() == c10::kFloat &&
        (input == c10::kBFloat16 || input == c10::kHalf)) {
      dtype = c10::kFloat;
    }
  }
  for (size_t i = 1; i < 3; ++i) {
    result->shapes[i] = eval ? ir::Shape(dtype, {0}) : ir::Shape(dtype, result->shapes[i].sizes());
  }
  // The functional batch norms' updated running statistics keep their dtype
  // (the reserve buffer of _batch_norm_with_update is uint8 and stays so).
  const c10::IValue* running = arg("running_mean");
  for (size_t i = 3; i < result->shapes.size() && running != nullptr && running->isTensor(); ++i) {
    if (!c10::isFloatingType(result->shapes[i].dtype())) continue;
    result->shapes[i] = ir::Shape(running->toTensor().scalar_type(), result->shapes[i].sizes());
  }
}

// Embedding bags' bookkeeping outputs (offset2bag, bag_size, max_indices). The
// CPU kernel sizes them by its code path, where Meta always gives one answer:
// its index outputs take the common type of indices and offsets (int64 when
// they differ); offset2bag is empty on the sum fast path (float, half or
// bfloat16 weights without padding_idx; device values are always dense, so the
// weight's stride never takes it off that path) and per index otherwise;
// bag_size has one entry per offset in sum mode of the forward-only op and one
// per bag elsewhere; max_indices is (bags, dim) in max mode and bag_size's
// shape otherwise.
void CpuEmbeddingBag(const c10::FunctionSchema& schema, const torch::jit::Stack& args, MetaResult* result) {
  if (result->shapes.size() != 4 || args.size() < 9 || !args[1].isTensor() || !args[2].isTensor() ||
      !args[4].isInt()) {
    return;
  }
  const at::Tensor& indices = args[1].toTensor();
  const at::Tensor& offsets = args[2].toTensor();
  const int64_t mode = args[4].toInt();
  const bool include_last = args[7].isBool() && args[7].toBool();
  const int64_t padding_idx = args[8].isInt() ? args[8].toInt() : -1;
  const c10::ScalarType weight = result->shapes[0].dtype();
  const c10::ScalarType index =
      indices.scalar_type() == offsets.scalar_type() ? indices.scalar_type() : c10::kLong;
  constexpr int64_t kSum = 0, kMax = 2;
  const int64_t offset_count = offsets.dim() == 1 ? offsets.size(0) : 0;
  const int64_t bags = include_last ? std::max<int64_t>(offset_count - 1, 0) : offset_count;
  const bool fast_sum = mode == kSum && padding_idx < 0 &&
                        (weight == c10::kFloat || weight == c10::kHalf || weight == c10::kBFloat16);
  const bool forward_only = schema.name() == "aten::_embedding_bag_forward_only";
  const int64_t bag_size = mode == kSum && forward_only ? offset_count : bags;
  std::vector<int64_t> max_indices = {bag_size};
  if (mode == kMax && result->shapes[0].dim() == 2) max_indices = {bags, result->shapes[0].sizes()[1]};
  result->shapes[1] = ir::Shape(index, {fast_sum ? 0 : (indices.dim() >= 1 ? indices.size(0) : 0)});
  result->shapes[2] = ir::Shape(index, {bag_size});
  result->shapes[3] = ir::Shape(index, std::move(max_indices));
}

// nansum with an empty dim list reduces every dim on the CPU (as sum does);
// its Meta kernel reduces none.
void CpuNansumAllDims(const c10::FunctionSchema& schema, const torch::jit::Stack& args, MetaResult* result) {
  std::optional<int> dim = schema.argumentIndexWithName("dim");
  std::optional<int> keepdim = schema.argumentIndexWithName("keepdim");
  if (!dim || static_cast<size_t>(*dim) >= args.size() || result->shapes.size() != 1 || args.empty() ||
      !args[0].isTensor()) {
    return;
  }
  const c10::IValue& dims = args[*dim];
  if (!dims.isIntList() || !dims.toIntList().empty()) return;
  const bool keep = keepdim && static_cast<size_t>(*keepdim) < args.size() && args[*keepdim].isBool() &&
                    args[*keepdim].toBool();
  result->shapes[0] =
      ir::Shape(result->shapes[0].dtype(), std::vector<int64_t>(keep ? args[0].toTensor().dim() : 0, 1));
}

// multilabel_margin_loss_forward's loss is 0-dim for a 0-dim or 1-d target
// (one sample) whatever the reduction on the CPU; the Meta kernel (a
// decomposition over the input made 2-d) gives [1] without a reduction.
void CpuMultilabelMarginLoss(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                             MetaResult* result) {
  std::optional<int> target = schema.argumentIndexWithName("target");
  if (!target || static_cast<size_t>(*target) >= args.size() || !args[*target].isTensor() ||
      result->shapes.empty() || args[*target].toTensor().dim() > 1) {
    return;
  }
  result->shapes[0] = ir::Shape(result->shapes[0].dtype(), std::vector<int64_t>{});
}

}  // namespace

MetaFixup MetaFixupFor(const std::string& name) {
  if (name == "aten::nansum") return CpuNansumAllDims;
  if (name == "aten::convolution" || name == "aten::_convolution") return CpuConvolutionLayout;
  if (name == "aten::convolution_backward") return CpuConvolutionBackwardLayout;
  if (name == "aten::multilabel_margin_loss_forward") return CpuMultilabelMarginLoss;
  if (name == "aten::_embedding_bag" || name == "aten::_embedding_bag_forward_only") {
    return CpuEmbeddingBag;
  }
  if (name == "aten::native_batch_norm" || name == "aten::_native_batch_norm_legit" ||
      name == "aten::_native_batch_norm_legit.no_stats" ||
      name == "aten::_native_batch_norm_legit_no_training" ||
      name == "aten::_native_batch_norm_legit_functional" || name == "aten::native_layer_norm" ||
      name == "aten::_batch_norm_with_update" || name == "aten::_batch_norm_with_update_functional") {
    return CpuNormStats;
  }
  return nullptr;
}

}  // namespace torch_neuron::lazy

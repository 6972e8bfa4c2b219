#include "lazy/meta_fixups.h"

#include <algorithm>
#include <optional>

namespace torch_neuron::lazy {
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

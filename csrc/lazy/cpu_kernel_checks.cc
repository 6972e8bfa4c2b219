#include "lazy/cpu_kernel_checks.h"

#include <ATen/core/List.h>
#include <ATen/ops/index.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "lazy/cpu_parity_rules.h"

namespace torch_neuron::lazy {

const c10::IValue* CallArgs::Get(std::string_view name) const {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() == name) return &stack[base + i];
  }
  return nullptr;
}

namespace {

bool IsTensor(const c10::IValue* v) { return v != nullptr && v->isTensor() && v->toTensor().defined(); }

const at::Tensor* TensorOrNull(const c10::IValue* v) { return IsTensor(v) ? &v->toTensor() : nullptr; }

// The schema's name without "aten::" and trailing underscores ("index_put" of
// "aten::_index_put_impl_" is "_index_put_impl").
std::string BaseName(const c10::OperatorHandle& op) {
  std::string name = op.schema().name().substr(6);
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name;
}

void Heaviside(const CallArgs& c) {
  const at::Tensor* self = TensorOrNull(&c.At(0));
  const at::Tensor* values = TensorOrNull(c.Get("values"));
  if (self == nullptr || values == nullptr) return;
  TORCH_CHECK(!self->is_complex() && !values->is_complex(),
              "heaviside is not yet implemented for complex tensors.");
  TORCH_CHECK(self->scalar_type() == values->scalar_type(),
              "heaviside is not yet implemented for tensors with different dtypes.");
}

void NoComplex(const CallArgs& c) {
  for (const c10::IValue* v : {&c.At(0), c.Get("other")}) {
    const at::Tensor* t = TensorOrNull(v);
    TORCH_CHECK(t == nullptr || !t->is_complex(), BaseName(c.op), " not implemented for complex tensors.");
  }
}

void Clamp(const CallArgs& c) {
  const c10::IValue* min = c.Get("min");
  const c10::IValue* max = c.Get("max");
  if (min == nullptr || max == nullptr) return;  // clamp_min, clamp_max
  // The refs' Meta kernel raises a ValueError in other words.
  TORCH_CHECK(!min->isNone() || !max->isNone(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
}

// pow.Tensor_Scalar's C++ Meta kernel refuses an integer (or bool) tensor to a
// negative integer power, as NumPy does; pow_.Scalar's Python one does not.
void Pow(const CallArgs& c) {
  const at::Tensor* self = TensorOrNull(&c.At(0));
  const c10::IValue* exponent = c.Get("exponent");
  if (self == nullptr || exponent == nullptr || !exponent->isInt()) return;
  TORCH_CHECK(exponent->toInt() >= 0 || c10::isFloatingType(self->scalar_type()) || self->is_complex(),
              "Integers to negative integer powers are not allowed.");
}

// randperm's CPU kernel refuses an n its result dtype cannot count to
// (check_supported_max_int_with_precision in TensorFactories.cpp).
void Randperm(const CallArgs& c) {
  const int64_t n = c.At(0).toInt();
  const c10::IValue* out = c.Get("out");
  const c10::IValue* dtype = c.Get("dtype");
  c10::ScalarType type = c10::kLong;
  if (IsTensor(out)) {
    type = out->toTensor().scalar_type();
  } else if (dtype != nullptr && !dtype->isNone()) {
    type = static_cast<c10::ScalarType>(dtype->toInt());
  }
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  at::scalar_tensor(n > 0 ? n - 1 : n, at::TensorOptions().dtype(type));  // the CPU's overflow error
  std::optional<std::pair<int64_t, const char*>> limit;
  if (type == c10::kHalf) limit = {{int64_t{1} << 11, "2049"}};
  if (type == c10::kFloat) limit = {{int64_t{1} << 24, "2^24+1"}};
  if (type == c10::kDouble) limit = {{int64_t{1} << 53, "2^53+1"}};
  TORCH_CHECK(!limit || n <= limit->first + 1, "n cannot be greater than ", limit ? limit->second : "",
              " for ", c10::toString(type), " type.");
}

void IndexPut(const CallArgs& c) {
  const at::Tensor& self = c.At(0).toTensor();
  const at::Tensor* values = TensorOrNull(c.Get("values"));
  if (values == nullptr) return;
  TORCH_CHECK(values->scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ",
              c10::toString(self.scalar_type()), " for the destination and ",
              c10::toString(values->scalar_type()), " for the source.");
  // Read as IValues: TorchScript passes the indices as a generic list.
  c10::List<std::optional<at::Tensor>> indices;
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& e : c.Get("indices")->toListRef()) {
    indices.push_back(e.isTensor() ? std::optional<at::Tensor>(e.toTensor()) : std::nullopt);
    if (!e.isTensor() || !e.toTensor().defined()) continue;
    const at::Tensor& i = e.toTensor();
    // Masks: the result's shape is their count of True, known when the graph runs.
    if (i.scalar_type() == c10::kBool || i.scalar_type() == c10::kByte) return;
    tensors.push_back(i);
  }
  // Without index tensors the indexing result is self: with accumulate the CPU
  // checks that the values broadcast to it (without, its kernel fails its own way).
  const c10::IValue* accumulate = c.Get("accumulate");
  if (tensors.empty() && !(accumulate != nullptr && accumulate->isBool() && accumulate->toBool())) return;
  size_t rank = 0;
  for (const at::Tensor& t : tensors) rank = std::max(rank, static_cast<size_t>(t.dim()));
  std::vector<int64_t> shape(rank, 1);
  bool broadcast = true;
  for (const at::Tensor& t : tensors) {
    for (int64_t d = 0; d < t.dim(); ++d) {
      int64_t& size = shape[rank - t.dim() + d];
      if (size == 1) {
        size = t.size(d);
      } else if (t.size(d) != 1 && t.size(d) != size) {
        broadcast = false;
      }
    }
  }
  if (!broadcast) {
    std::string shapes;
    for (const at::Tensor& t : tensors) shapes += (shapes.empty() ? "" : ", ") + c10::str(t.sizes());
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together with shapes ",
                      shapes);
  }
  const at::Tensor result = at::index(self, indices);
  const at::IntArrayRef value = values->sizes();
  bool fits = value.size() <= static_cast<size_t>(result.dim());
  for (size_t i = 0; fits && i < value.size(); ++i) {
    const int64_t v = value[value.size() - 1 - i];
    fits = v == 1 || v == result.size(result.dim() - 1 - static_cast<int64_t>(i));
  }
  TORCH_CHECK(fits, "shape mismatch: value tensor of shape ", value,
              " cannot be broadcast to indexing result of shape ", result.sizes());
}

// An index tensor with elements into a dim of size 0: the CPU kernel's bounds
// check refuses any index there, whatever its values.
void IndexIntoEmptyDim(const CallArgs& c) {
  const at::Tensor& self = c.At(0).toTensor();
  const c10::IValue* indices = c.Get("indices");
  if (indices == nullptr || !indices->isList()) return;
  int64_t dim = 0;
  for (const c10::IValue& e : indices->toListRef()) {
    if (!e.isTensor() || !e.toTensor().defined()) {
      ++dim;
      continue;
    }
    const at::Tensor& i = e.toTensor();
    if (i.scalar_type() == c10::kBool || i.scalar_type() == c10::kByte) {
      dim += i.dim();  // a mask spans as many dims as it has
      continue;
    }
    TORCH_CHECK_INDEX(dim >= self.dim() || self.size(dim) != 0 || i.numel() == 0,
                      "index is out of bounds for dimension with size 0");
    ++dim;
  }
}

// searchsorted and bucketize copy non-contiguous arguments on the CPU and warn
// once per process that it costs; neuron tensors report the CPU's strides, so
// the same warning comes at the call.
void WarnNonContiguous(std::initializer_list<std::pair<const char*, const c10::IValue*>> arguments) {
  static std::mutex mu;
  static auto* warned = new absl::flat_hash_set<std::string>();
  for (const auto& [what, v] : arguments) {
    const at::Tensor* t = TensorOrNull(v);
    if (t == nullptr || t->is_contiguous()) continue;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!warned->insert(what).second) continue;
    }
    TORCH_WARN("torch.searchsorted(): ", what,
               " tensor is non-contiguous, this will lower the performance due to "
               "extra data copy when converting non-contiguous tensor to contiguous, please use contiguous ",
               what, " tensor if possible. This message will only appear once per program.");
  }
}

// The sorter's size, which the probe (cpu_parity.cc) cuts away, first.
void Searchsorted(const CallArgs& c) {
  const at::Tensor* sorted = TensorOrNull(&c.At(0));
  const at::Tensor* sorter = TensorOrNull(c.Get("sorter"));
  if (sorted == nullptr) return;
  TORCH_CHECK(sorter == nullptr || sorter->sizes() == sorted->sizes(),
              "torch.searchsorted(): boundary and sorter must have the same size, but got boundary tensor ",
              sorted->sizes(), "and got sorter tensor ",
              sorter == nullptr ? at::IntArrayRef() : sorter->sizes());
  WarnNonContiguous({{"input value", c.Get("self")}, {"boundary", &c.At(0)}, {"sorter", c.Get("sorter")}});
}

void Bucketize(const CallArgs& c) {
  const at::Tensor* boundaries = TensorOrNull(c.Get("boundaries"));
  TORCH_CHECK(boundaries == nullptr || boundaries->dim() == 1,
              "boundaries tensor must be 1 dimension, but got dim(",
              boundaries == nullptr ? 0 : boundaries->dim(), ")");
  WarnNonContiguous({{"input value", c.Get("self")}, {"boundary", c.Get("boundaries")}});
}

// The CPU's reductions over named dims keep them in a 64-bit mask and refuse
// tensors of more dims, in the kernel.
void DimMask(const CallArgs& c) {
  const at::Tensor* self = TensorOrNull(&c.At(0));
  const c10::IValue* dim = c.Get("dim");
  if (self == nullptr || self->dim() <= 64 || dim == nullptr || dim->isNone()) return;
  if (dim->isIntList() && dim->toIntList().empty()) return;
  TORCH_CHECK(false, "only tensors with up to 64 dims are supported");
}

void EmbeddingBag(const CallArgs& c) {
  const at::Tensor& weight = c.At(0).toTensor();
  const at::Tensor& indices = c.At(1).toTensor();
  const at::Tensor& offsets = c.At(2).toTensor();
  TORCH_CHECK(indices.dim() == 1 || indices.dim() == 2,
              "input has to be a 1D or 2D Tensor, but got Tensor of dimension ", indices.dim());
  TORCH_CHECK(offsets.dim() == 1, "offsets has to be a 1D Tensor, but got Tensor of dimension ",
              offsets.dim());
  TORCH_CHECK(weight.dim() == 2, "weight has to be a 2D Tensor, but got Tensor of dimension ", weight.dim());
  const at::Tensor* per_sample = TensorOrNull(c.Get("per_sample_weights"));
  TORCH_CHECK(per_sample == nullptr || per_sample->scalar_type() == weight.scalar_type(),
              "Expected tensor for argument #1 'weight' to have the same type as tensor for argument #1 "
              "'per_sample_weights'; but type torch.",
              c10::toString(weight.scalar_type()), "Tensor does not equal torch.",
              per_sample == nullptr ? "" : c10::toString(per_sample->scalar_type()), "Tensor");
}

// max, min, median, nanmedian and mode over a dim of size 0 have no value to
// give: the CPU refuses them (an IndexError naming the dim, as wrapped), and
// max() and min() of an empty tensor; the Meta kernels return empty results.
void NonemptyReduction(const CallArgs& c) {
  const at::Tensor* self = TensorOrNull(&c.At(0));
  if (self == nullptr) return;
  const std::string name = BaseName(c.op);
  const std::string reported = name == "nanmedian" ? "median" : name;
  const c10::IValue* dim = c.Get("dim");
  if (dim == nullptr) {
    // max(a, b) is elementwise; max() and min() of nothing have no value.
    if ((name == "max" || name == "min") && c.Get("other") == nullptr) {
      TORCH_CHECK(
          self->numel() != 0, name,
          "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
          "with the 'dim' argument.");
    }
    return;
  }
  if (!dim->isInt() || self->dim() == 0) return;  // a named dim, a scalar: the Meta kernel decides
  const int64_t d = dim->toInt();
  if (d < -self->dim() || d >= self->dim()) return;
  const int64_t wrapped = d < 0 ? d + self->dim() : d;
  TORCH_CHECK_INDEX(self->size(wrapped) != 0, reported, "(): Expected reduction dim ", wrapped,
                    " to have non-zero size.");
}

// abs of a complex tensor is real: the CPU refuses to write it into self.
void AbsInPlace(const CallArgs& c) {
  TORCH_CHECK(!c.At(0).toTensor().is_complex(), "In-place abs is not supported for complex tensors.");
}

// The CPU refuses to scatter into a strided image whose elements repeat (a
// zero stride); the C++ Meta kernel does not check. (Functionalization's own
// write-back through such a view is refused here too: it cannot say which of
// the repeated elements a write meant.)
void AsStridedScatter(const CallArgs& c) {
  const std::vector<int64_t> size = c.Get("size")->toIntVector();
  const std::vector<int64_t> stride = c.Get("stride")->toIntVector();
  for (size_t i = 0; i < std::min(size.size(), stride.size()); ++i) {
    TORCH_CHECK(stride[i] != 0 || size[i] <= 1, kOverlapMessage);
  }
}

struct Named {
  std::string_view name;
  KernelCheck check;
};

// By BaseName: every overload (functional, out= and in-place).
constexpr Named kChecks[] = {
    {"heaviside", &Heaviside},
    {"maximum", &NoComplex},
    {"minimum", &NoComplex},
    {"fmax", &NoComplex},
    {"fmin", &NoComplex},
    {"clamp", &Clamp},
    {"pow", &Pow},
    {"randperm", &Randperm},
    {"index", &IndexIntoEmptyDim},
    {"index_put", &IndexPut},
    {"_index_put_impl", &IndexPut},
    {"searchsorted", &Searchsorted},
    {"bucketize", &Bucketize},
    {"nansum", &DimMask},
    {"argmax", &DimMask},
    {"argmin", &DimMask},
    {"_embedding_bag", &EmbeddingBag},
    {"_embedding_bag_forward_only", &EmbeddingBag},
    {"max", &NonemptyReduction},
    {"min", &NonemptyReduction},
    {"median", &NonemptyReduction},
    {"nanmedian", &NonemptyReduction},
    {"mode", &NonemptyReduction},
    {"as_strided_scatter", &AsStridedScatter},
};

}  // namespace

KernelCheck KernelCheckFor(const c10::OperatorHandle& op) {
  const std::string& full = op.schema().name();
  if (full.rfind("aten::", 0) != 0) return nullptr;
  if (full == "aten::abs_") return &AbsInPlace;  // in-place form only
  const std::string name = BaseName(op);
  for (const Named& n : kChecks) {
    if (n.name == name) return n.check;
  }
  return nullptr;
}

}  // namespace torch_neuron::lazy

#include "ir/op_traits.h"

#include <array>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::ir {
namespace {

// Matched as prefixes of the full name: every overload and variant
// (unique_consecutive, unique_dim) is data-dependent too.
constexpr std::array<std::string_view, 7> kDataDependentPrefixes = {"aten::nonzero",
                                                                    "aten::masked_select",
                                                                    "aten::unique",
                                                                    "aten::_unique",
                                                                    "aten::repeat_interleave.Tensor",
                                                                    "aten::bincount",
                                                                    "aten::argwhere"};
// ...except these, whose output size is an argument.
constexpr std::array<std::string_view, 1> kShapedByArgumentPrefixes = {"aten::nonzero_static"};

constexpr std::array<std::string_view, 6> kIdentities = {"aten::detach_copy", "aten::alias_copy",
                                                         "aten::clone",       "aten::detach",
                                                         "aten::alias",       "aten::lift_fresh_copy"};

constexpr std::array<std::string_view, 3> kCpuIndexTensorPrefixes = {"aten::index", "aten::_index_put_impl_",
                                                                     "aten::_ctc_loss"};

// Words of the operator name (not the overload) of ops that draw.
constexpr std::array<std::string_view, 11> kRandomWords = {
    "rand",        "normal", "bernoulli", "dropout",    "multinomial", "poisson",
    "exponential", "cauchy", "geometric", "log_normal", "uniform"};

constexpr std::array<std::string_view, 4> kShapeFromScalarValuesPrefixes = {
    "aten::arange", "aten::range", "aten::linspace", "aten::logspace"};

constexpr std::array<std::string_view, 2> kMetaChecksScalarValuesPrefixes = {"aten::linalg_vector_norm",
                                                                             "aten::renorm"};

// Functionalization's copies, and the views themselves: those reach the tracer
// when a composite kernel runs below functionalization (under inference_mode,
// which skips the autograd keys, matmul's reshape calls _reshape_alias).
constexpr std::array<std::string_view, 4> kAddressesStorage = {
    "aten::as_strided_copy", "aten::_reshape_alias_copy", "aten::as_strided", "aten::_reshape_alias"};

// view_copy's form is reshape: its input may itself be a strided view.
constexpr std::array<std::string_view, 7> kCollectiveOps = {"neuron::all_reduce",
                                                            "neuron::broadcast",
                                                            "neuron::all_gather_into_tensor",
                                                            "neuron::reduce_scatter_tensor",
                                                            "neuron::all_to_all_single",
                                                            "neuron::send",
                                                            "neuron::recv"};

const std::vector<std::pair<std::string_view, std::string_view>> kViewForms = {
    {"aten::view_copy", "aten::reshape"},
    {"aten::_unsafe_view", "aten::reshape"},
    {"aten::t_copy", "aten::t"},
    {"aten::transpose_copy.int", "aten::transpose.int"},
    {"aten::permute_copy", "aten::permute"},
    {"aten::expand_copy", "aten::expand"},
    {"aten::unsqueeze_copy", "aten::unsqueeze"},
    {"aten::squeeze_copy", "aten::squeeze"},
    {"aten::squeeze_copy.dim", "aten::squeeze.dim"},
    {"aten::squeeze_copy.dims", "aten::squeeze.dims"},
    {"aten::slice_copy.Tensor", "aten::slice.Tensor"},
    {"aten::select_copy.int", "aten::select.int"},
    {"aten::split_copy.Tensor", "aten::split.Tensor"},
    {"aten::split_with_sizes_copy", "aten::split_with_sizes"},
    {"aten::unbind_copy.int", "aten::unbind.int"},
    {"aten::alias_copy", "aten::alias"},
    {"aten::diagonal_copy", "aten::diagonal"},
};

constexpr std::array<std::string_view, 30> kStrideAgnostic = {"neuron::fused_kernel",
                                                              "neuron::fused_row_kernel",
                                                              "aten::mm",
                                                              "aten::bmm",
                                                              "aten::addmm",
                                                              "aten::baddbmm",
                                                              "aten::mv",
                                                              "aten::addmv",
                                                              "aten::add.Tensor",
                                                              "aten::sub.Tensor",
                                                              "aten::mul.Tensor",
                                                              "aten::div.Tensor",
                                                              "aten::add.Scalar",
                                                              "aten::mul.Scalar",
                                                              "aten::neg",
                                                              "aten::exp",
                                                              "aten::tanh",
                                                              "aten::sigmoid",
                                                              "aten::relu",
                                                              "aten::gelu",
                                                              "aten::gelu_backward",
                                                              "aten::tanh_backward",
                                                              "aten::threshold_backward",
                                                              "aten::where.self",
                                                              "aten::masked_fill.Scalar",
                                                              "aten::sum.dim_IntList",
                                                              "aten::mean.dim",
                                                              "aten::amax",
                                                              "aten::clone",
                                                              "aten::_to_copy"};

// In-place ops the CPU lets write into overlapping memory: fills (every
// element gets the same value) and ops that copy their input before writing.
constexpr std::array<std::string_view, 7> kWritesOverlappingMemory = {
    "aten::zero_",          "aten::fill_",           "aten::tril_",           "aten::triu_",
    "aten::conj_physical_", "aten::_philox_normal_", "aten::_philox_uniform_"};

// In-place ops without the inplace_view tag that write metadata or sparse
// storage, not elements.
constexpr std::array<std::string_view, 7> kWritesMetadataOnly = {
    "aten::requires_grad_",           "aten::_resize_output_", "aten::sparse_resize_",
    "aten::sparse_resize_and_clear_", "aten::_coalesced_",     "aten::copy_sparse_to_sparse_",
    "aten::resize_as_sparse_"};

// Found by tests/python/test_meta_checks.py, which fails where an in-place
// op's own Meta kernel accepts a broadcast of self that no rule checks.
constexpr std::array<std::string_view, 17> kElementwiseUntagged = {
    "aten::__iand__",   "aten::__ior__",   "aten::__ixor__",      "aten::__ilshift__", "aten::__irshift__",
    "aten::copysign_",  "aten::eq_",       "aten::ne_",           "aten::ge_",         "aten::gt_",
    "aten::le_",        "aten::lt_",       "aten::floor_divide_", "aten::gcd_",        "aten::lcm_",
    "aten::heaviside_", "aten::_add_relu_"};

constexpr std::array<std::string_view, 2> kCastsBeforeOwnChecks = {"aten::__ilshift__", "aten::__irshift__"};

constexpr std::array<std::string_view, 8> kProbesRandomParameters = {
    "aten::random_",    "aten::uniform_", "aten::normal_",     "aten::exponential_",
    "aten::geometric_", "aten::cauchy_",  "aten::log_normal_", "aten::bernoulli_"};

// bernoulli(x, p)'s probability is checked as bernoulli_'s. addcdiv_'s Meta
// kernel (a Python one) refuses integer division with its message's parts as
// a tuple; the CPU's words come from the probe.
constexpr std::array<std::string_view, 12> kProbesOnCpu = {
    "aten::add",   "aten::add_",         "aten::sub",       "aten::sub_", "aten::rsub",  "aten::complex",
    "aten::polar", "aten::searchsorted", "aten::bernoulli", "aten::celu", "aten::celu_", "aten::addcdiv_"};

constexpr std::array<std::string_view, 6> kProbeByKinds = {"aten::add",  "aten::add_", "aten::sub",
                                                           "aten::sub_", "aten::rsub", "aten::addcdiv_"};

// (This Abseil's string_view is its own type: std::string_view is converted.)
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

template <size_t N>
bool AnyPrefix(std::string_view op, const std::array<std::string_view, N>& prefixes) {
  for (std::string_view p : prefixes) {
    if (absl::StartsWith(Absl(op), Absl(p))) return true;
  }
  return false;
}

template <size_t N>
bool OneOf(std::string_view op, const std::array<std::string_view, N>& names) {
  for (std::string_view n : names) {
    if (op == n) return true;
  }
  return false;
}

// "aten::add" of "aten::add.Tensor".
std::string_view NameWithoutOverload(std::string_view op) {
  const size_t ns = op.find("::");
  const size_t dot = op.find('.', ns == std::string_view::npos ? 0 : ns + 2);
  return dot == std::string_view::npos ? op : op.substr(0, dot);
}

OpTraits Compute(std::string_view op) {
  OpTraits t;
  t.data_dependent = AnyPrefix(op, kDataDependentPrefixes) && !AnyPrefix(op, kShapedByArgumentPrefixes);
  t.checks_metadata_only = op == "aten::_assert_tensor_metadata";
  t.tensor_assert = op == "aten::_assert_async" || op == "aten::_assert_async.msg";
  t.identity = OneOf(op, kIdentities);
  t.cpu_index_tensors = AnyPrefix(op, kCpuIndexTensorPrefixes);
  if (op == "aten::zeros" || op == "aten::zeros_like" || op == "aten::new_zeros") t.fill = FillKind::kZeros;
  if (op == "aten::ones" || op == "aten::ones_like" || op == "aten::new_ones") t.fill = FillKind::kOnes;
  if (op == "aten::full" || op == "aten::full_like" || op == "aten::new_full") t.fill = FillKind::kFull;
  const std::string_view name = NameWithoutOverload(op);
  for (std::string_view word : kRandomWords) t.random |= absl::StrContains(Absl(name), Absl(word));
  t.shape_from_scalar_values = AnyPrefix(op, kShapeFromScalarValuesPrefixes);
  t.meta_checks_scalar_values = AnyPrefix(op, kMetaChecksScalarValuesPrefixes);
  t.addresses_storage = OneOf(op, kAddressesStorage);
  for (const auto& [copy, view] : kViewForms) {
    if (op == copy) t.view_form = view;
  }
  t.runs_as_reshape = op == "aten::view" || op == "aten::_unsafe_view";
  t.stride_agnostic = OneOf(op, kStrideAgnostic);
  t.writes_overlapping_memory = OneOf(name, kWritesOverlappingMemory);
  t.writes_metadata_only = OneOf(name, kWritesMetadataOnly);
  t.elementwise_untagged = OneOf(name, kElementwiseUntagged);
  t.casts_before_own_checks = OneOf(name, kCastsBeforeOwnChecks);
  t.probes_random_parameters = OneOf(name, kProbesRandomParameters);
  t.probes_on_cpu = OneOf(name, kProbesOnCpu);
  t.probe_by_kinds = OneOf(name, kProbeByKinds);
  return t;
}

}  // namespace

const OpTraits& TraitsOf(std::string_view op) {
  static absl::Mutex mu;
  // node_hash_map: an entry's address never changes, so references stay valid.
  static auto* table ABSL_GUARDED_BY(mu) = new absl::node_hash_map<std::string, OpTraits>();
  absl::MutexLock lock(&mu);
  auto it = table->find(Absl(op));
  if (it == table->end()) it = table->emplace(std::string(op), Compute(op)).first;
  return it->second;
}

const std::vector<std::pair<std::string_view, std::string_view>>& ViewForms() { return kViewForms; }

bool IsCollectiveOp(std::string_view op) {
  for (std::string_view c : kCollectiveOps) {
    if (op == c) return true;
  }
  return false;
}

}  // namespace torch_neuron::ir

#include "lazy/overlap_checks.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/enum_tag.h>

#include <string_view>

#include "absl/container/flat_hash_map.h"

namespace torch_neuron::lazy {
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

}  // namespace torch_neuron::lazy

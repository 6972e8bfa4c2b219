#include "runtime/op_lookup.h"

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::runtime {

absl::StatusOr<c10::OperatorHandle> FindOperator(const std::string& op) {
  static absl::Mutex mu;
  static auto* cache ABSL_GUARDED_BY(mu) = new absl::flat_hash_map<std::string, c10::OperatorHandle>();
  {
    absl::MutexLock lock(&mu);
    auto it = cache->find(op);
    if (it != cache->end()) return it->second;
  }
  // The overload follows the last '.' after the namespace's "::".
  const size_t ns = op.find("::");
  const size_t dot = op.find('.', ns == std::string::npos ? 0 : ns + 2);
  const std::string name = dot == std::string::npos ? op : op.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
  std::optional<c10::OperatorHandle> handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle) return absl::NotFoundError(absl::StrCat("no operator named ", op));
  absl::MutexLock lock(&mu);
  cache->emplace(op, *handle);
  return *handle;
}

const std::vector<std::pair<std::string, std::string>>& ViewForms() {
  static const auto* forms = new std::vector<std::pair<std::string, std::string>>{
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
  return *forms;
}

const std::string* ViewFormOf(const std::string& op) {
  static const auto* views =
      new absl::flat_hash_map<std::string, std::string>(ViewForms().begin(), ViewForms().end());
  auto it = views->find(op);
  return it == views->end() ? nullptr : &it->second;
}

c10::IValue HostAttr(const c10::IValue& attr) {
  if (attr.isDevice() && attr.toDevice().type() == c10::DeviceType::PrivateUse1) {
    return c10::Device(c10::DeviceType::CPU);
  }
  return attr;
}

}  // namespace torch_neuron::runtime

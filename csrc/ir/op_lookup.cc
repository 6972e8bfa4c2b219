#include "ir/op_lookup.h"

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::ir {

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

c10::IValue HostAttr(const c10::IValue& attr) {
  if (attr.isDevice() && attr.toDevice().type() == c10::DeviceType::PrivateUse1) {
    return c10::Device(c10::DeviceType::CPU);
  }
  return attr;
}

}  // namespace torch_neuron::ir

#include "lazy/aten_ops.h"

#include <optional>

namespace torch_neuron::lazy {

void ForEachAtenOp(const std::function<void(const c10::OperatorHandle&, const std::string&)>& fn) {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasSchema()) continue;
    const std::string bare = name.name.substr(6);
    fn(*op, name.overload_name.empty() ? bare : bare + "." + name.overload_name);
  }
}

}  // namespace torch_neuron::lazy

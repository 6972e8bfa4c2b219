#pragma once
// The last provider of the chain: compiles the request's CompileRequest here.
// The compiler answers with NEFF bytes; the program is what the NEFF reader
// makes of them, exactly as for an entry from the disk, Redis or the compile
// service, so a program the reader rejects is the graph's error and never
// reaches a cache. Compile events go to observers (the recompile report, graph
// dumps, the tier-1 fallback warning live in lazy/, not here).

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cache/executable_provider.h"

namespace torch_neuron::cache {

struct CompileEvent {
  const ExecutableRequest& request;
  const compiler::CompileResult& result;
  int64_t compile_ns;
};
using CompileObserver = std::function<void(const CompileEvent&)>;

class LocalCompileProvider : public ExecutableProvider {
 public:
  const char* name() const override { return "compile"; }
  absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest& request, RequestHolds& holds) override;
  // Called on the compiling thread after each successful compile.
  void AddObserver(CompileObserver observer);

 private:
  absl::Mutex mu_;
  std::vector<CompileObserver> observers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torch_neuron::cache

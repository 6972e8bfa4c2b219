#include "cache/compile_provider.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "neff/neff_reader.h"
#include "runtime/native_library.h"
#include "base/profiler.h"

namespace torch_neuron::cache {
namespace {

struct CompileMetrics {
  metrics::Counter* compiles = metrics::GetCounter("graph.compile.count");
  metrics::Counter* compile_ns = metrics::GetCounter("graph.compile.ns");
  metrics::Counter* compiled_nodes = metrics::GetCounter("graph.compile.nodes");
  metrics::Counter* misses = metrics::GetCounter("cache.miss.count");
  metrics::Counter* tier1_fallbacks = metrics::GetCounter("compile.tier1_fallback.count");
};

const CompileMetrics& CompileCounters() {
  static const CompileMetrics* counters = new CompileMetrics();
  return *counters;
}

}  // namespace

void LocalCompileProvider::AddObserver(CompileObserver observer) {
  absl::MutexLock lock(&mu_);
  observers_.push_back(std::move(observer));
}

absl::StatusOr<ProvidedExecutable> LocalCompileProvider::Get(const ExecutableRequest& request,
                                                             RequestHolds& holds) {
  (void)holds;
  if (request.compile == nullptr || request.target == nullptr) {
    return absl::NotFoundError("no graph to compile");
  }
  if (request.stored_only) return absl::NotFoundError("only stored executables were asked for");
  const proto::CompileRequest& compile = *request.compile;
  CompileCounters().misses->Add(1);
  profiler::Scope scope("compile", [&] {
    return absl::StrCat("graph ", request.KeyHex().substr(0, 16), " (", compile.nodes_size(), " nodes)");
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<compiler::CompileResult> result =
      compiler::Compile(compile, request.options, *request.target);
  if (!result.ok()) return result.status();
  if (!result->tier1_error.empty()) CompileCounters().tier1_fallbacks->Add(1);
  absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(result->neff, request.fingerprint);
  if (!loaded.ok()) {
    return absl::InternalError(absl::StrCat("the compiler produced an executable its reader rejects (",
                                            loaded.status().message(), "); graph key ", request.KeyHex()));
  }
  ProvidedExecutable found;
  found.program = loaded->program;
  // A tier-0 fallback stays out of persistent caches: under the tier-1 key it
  // would outlive the broken toolchain that caused it.
  found.persistent = result->tier1_error.empty();
  found.bytes = result->neff.size();
  found.neff = std::move(result->neff);  // observers read the debug text only
  // Loaded as every executable is, wherever it was compiled.
  runtime::LoadNativeObjects(found.program->native_objects);
  const int64_t ns = metrics::NanosSince(start);
  CompileCounters().compiles->Add(1);
  CompileCounters().compile_ns->Add(ns);
  CompileCounters().compiled_nodes->Add(compile.nodes_size());
  std::vector<CompileObserver> observers;
  {
    absl::MutexLock lock(&mu_);
    observers = observers_;
  }
  const CompileEvent event{request, *result, ns};
  for (const CompileObserver& observer : observers) observer(event);
  return found;
}

}  // namespace torch_neuron::cache

#include "cache/compile_provider.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "c10/core/ScalarType.h"
#include "neff/neff_reader.h"
#include "neff/neff_writer.h"
#include "runtime/native_library.h"
#include "runtime/profiler.h"

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

int64_t ByteSize(const ir::Shape& shape) {
  return shape.numel() * static_cast<int64_t>(c10::elementSize(shape.dtype()));
}

}  // namespace

proto::Signature SignatureFor(const ir::CanonicalGraph& g) {
  proto::Signature s;
  std::vector<int64_t> input_bytes;
  for (int32_t p : g.parameters) {
    const ir::Node* n = g.nodes[p];
    s.add_input_kinds(n->kind() == ir::NodeKind::kDeviceData  ? proto::Signature::DEVICE_DATA
                      : n->kind() == ir::NodeKind::kGenerator ? proto::Signature::GENERATOR
                                                              : proto::Signature::SCALAR);
    proto::TensorSpec* spec = s.add_inputs();
    spec->set_dtype(static_cast<int32_t>(n->shape().dtype()));
    for (int64_t d : n->shape().sizes()) spec->add_sizes(d);
    input_bytes.push_back(n->kind() == ir::NodeKind::kDeviceData ? ByteSize(n->shape()) : -1);
  }
  for (const auto& [node, index] : g.outputs) {
    const ir::Shape& shape = g.nodes[node]->shape(index);
    proto::TensorSpec* spec = s.add_outputs();
    spec->set_dtype(static_cast<int32_t>(shape.dtype()));
    for (int64_t d : shape.sizes()) spec->add_sizes(d);
    proto::DonationCandidates* donation = s.add_donations();
    const int64_t bytes = ByteSize(shape);
    for (size_t i = 0; i < input_bytes.size(); ++i) {
      if (input_bytes[i] == bytes && bytes > 0) donation->add_inputs(static_cast<int32_t>(i));
    }
  }
  return s;
}

void LocalCompileProvider::AddObserver(CompileObserver observer) {
  absl::MutexLock lock(&mu_);
  observers_.push_back(std::move(observer));
}

absl::StatusOr<ProvidedExecutable> LocalCompileProvider::Get(const ExecutableRequest& request,
                                                             RequestHolds& holds) {
  (void)holds;
  if (request.graph == nullptr) return absl::NotFoundError("no graph to compile");
  if (request.stored_only) return absl::NotFoundError("only stored executables were asked for");
  const ir::CanonicalGraph& g = *request.graph;
  CompileCounters().misses->Add(1);
  runtime::profiler::Scope scope("compile", [&] {
    return absl::StrCat("graph ", ir::HashToHex(g.hash).substr(0, 16), " (", g.size(), " nodes)");
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<compiler::CompileResult> result = compiler::Compile(g, request.options);
  if (!result.ok()) return result.status();
  if (!result->tier1_error.empty()) CompileCounters().tier1_fallbacks->Add(1);

  ProvidedExecutable found;
  found.program = result->program;
  // A tier-0 fallback stays out of persistent caches: under the tier-1 key it
  // would outlive the broken toolchain that caused it.
  found.persistent = result->tier1_error.empty();
  absl::StatusOr<std::string> neff =
      neff::WriteNeff({result->program.get(), *request.fingerprint, g.hash, SignatureFor(g)});
  if (neff.ok()) {
    absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(*neff, request.fingerprint);
    if (!loaded.ok()) {
      return absl::InternalError(absl::StrCat("the compiler produced an executable its reader rejects (",
                                              loaded.status().message(), "); graph ", ir::HashToHex(g.hash)));
    }
    found.program = loaded->program;
    found.bytes = neff->size();
    found.neff = *std::move(neff);
  }
  // Loaded as every executable is, wherever it was compiled.
  runtime::LoadNativeObjects(found.program->native_objects);
  const int64_t ns = metrics::NanosSince(start);
  CompileCounters().compiles->Add(1);
  CompileCounters().compile_ns->Add(ns);
  CompileCounters().compiled_nodes->Add(g.size());
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

#include "lazy/executable_cache.h"

#include <atomic>
#include <utility>

#include "base/config.h"
#include "base/metrics.h"
#include "c10/util/Exception.h"
#include "cache/chain_assembly.h"
#include "cache/tiered_chain.h"
#include "compiler/compile_request.h"
#include "compiler/fingerprint.h"
#include "google/protobuf/arena.h"
#include "lazy/compile_report.h"
#include "service/client.h"

namespace torch_neuron::lazy {
namespace {

// The top: the process's executable source and compile targets are made from
// the config once, on first use; below here only sub-configs are passed.
struct ExecutableSource {
  std::unique_ptr<cache::AssembledChain> assembled;
  cache::TieredChain tiered;

  explicit ExecutableSource(std::unique_ptr<cache::AssembledChain> chain)
      : assembled(std::move(chain)), tiered(assembled->chain.get()) {}
};

// Set once the source is built: waiting for (or dropping) background compiles
// must not build it, which would fix its config before a test's override.
std::atomic<ExecutableSource*> built_source{nullptr};

ExecutableSource& Source() {
  static ExecutableSource* source = [] {
    const Config& config = GlobalConfig();
    auto* made = new ExecutableSource(cache::AssembleChain(
        config.cache, service::ServiceLevelFor(config.cache, config.compile.cxx), {ObserveCompile}));
    built_source.store(made, std::memory_order_release);
    return made;
  }();
  return *source;
}

cache::CompileTargets& Targets() {
  static auto* targets = new cache::CompileTargets(GlobalConfig().cache);
  return *targets;
}

// The request for `g` under `settings`: its key, without the graph (a memory
// hit needs no more); tiered when `tiered` and the settings are.
cache::ExecutableRequest RequestFor(const ir::CanonicalGraph& g, const cache::CompileSettings& settings,
                                    bool tiered) {
  cache::ExecutableRequest request;
  request.options = settings.options;
  request.target = settings.target;
  request.key = compiler::CacheKey(g.hash, settings.fingerprint->hash);
  request.fingerprint = &settings.fingerprint->fingerprint;
  request.graph_hash = g.hash;
  if (tiered) request.stand_in_fingerprint = settings.stand_in;
  return request;
}

// Writes `g` into `request` as the CompileRequest compiling providers take,
// unless it holds one already. UNIMPLEMENTED for a graph with an attribute
// that has no serialized form.
absl::Status AddCompileRequest(const ir::CanonicalGraph& g, cache::ExecutableRequest& request) {
  if (request.compile != nullptr) return absl::OkStatus();
  static metrics::Counter* const written = metrics::GetCounter("graph.compile_request.count");
  written->Add(1);
  // On an arena: the request's thousands of small messages are a few blocks,
  // allocated and freed at once. Freed one by one, they filled malloc's fast
  // bins, and the next sync's first large allocation consolidated them all
  // (callgrind: a cached mark_step of 1,000 nodes after a compile cost 1.9M
  // instructions instead of 0.6M).
  struct ArenaRequest {
    google::protobuf::Arena arena;
    proto::CompileRequest* request = google::protobuf::Arena::CreateMessage<proto::CompileRequest>(&arena);
  };
  auto made = std::make_shared<ArenaRequest>();
  if (absl::Status s = compiler::WriteCompileRequest(g, request.options, made->request); !s.ok()) return s;
  proto::CompileRequest* message = made->request;
  request.compile = std::shared_ptr<const proto::CompileRequest>(std::move(made), message);
  return absl::OkStatus();
}

// The program of `request` (whose key is `g`'s), from the source.
absl::StatusOr<std::shared_ptr<const runtime::Program>> Provide(const ir::CanonicalGraph& g,
                                                                cache::ExecutableRequest request,
                                                                bool* compiled) {
  if (compiled != nullptr) *compiled = false;
  absl::StatusOr<cache::ProviderChain::Answer> answer = Source().tiered.Get(
      std::move(request), [&g](cache::ExecutableRequest& miss) { return AddCompileRequest(g, miss); });
  if (!answer.ok()) return answer.status();
  for (const absl::Status& error : answer->keep_errors) {
    TORCH_WARN_ONCE("torch_neuron: ", error.message(), "; continuing without it");
  }
  if (compiled != nullptr) *compiled = answer->source == "compile" && !answer->waited;
  return answer->program;
}

}  // namespace

cache::CompileSettings CurrentCompileSettings() { return Targets().SettingsFor(GlobalConfig().compile); }

const proto::CompilerFingerprint& CurrentFingerprint() {
  return CurrentCompileSettings().fingerprint->fingerprint;
}

absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompile(const ir::CanonicalGraph& g,
                                                                      bool* compiled) {
  return Provide(g, RequestFor(g, CurrentCompileSettings(), /*tiered=*/false), compiled);
}

absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileTiered(const ir::CanonicalGraph& g,
                                                                            bool* compiled) {
  return FindOrCompileWith(g, CurrentCompileSettings(), compiled);
}

absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileWith(
    const ir::CanonicalGraph& g, const cache::CompileSettings& settings, bool* compiled) {
  return Provide(g, RequestFor(g, settings, /*tiered=*/true), compiled);
}

void WaitForBackgroundCompiles() {
  if (ExecutableSource* source = built_source.load(std::memory_order_acquire)) source->tiered.WaitIdle();
}

void DropQueuedBackgroundCompiles() {
  if (ExecutableSource* source = built_source.load(std::memory_order_acquire)) source->tiered.DropQueued();
}

ir::hash_t ExecutableKey(const ir::CanonicalGraph& g, const cache::CompileSettings& settings) {
  return compiler::CacheKey(g.hash, settings.fingerprint->hash);
}

std::shared_ptr<const runtime::Program> FindInMemory(const ir::CanonicalGraph& g) {
  return Source().tiered.Lookup(RequestFor(g, CurrentCompileSettings(), /*tiered=*/true));
}

void ClearMemoryCache() { Source().assembled->memory->Clear(); }

}  // namespace torch_neuron::lazy

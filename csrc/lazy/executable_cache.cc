#include "lazy/executable_cache.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/arena.h"
#include "base/config.h"
#include "base/metrics.h"
#include "c10/util/Exception.h"
#include "cache/compile_provider.h"
#include "cache/disk_cache.h"
#include "cache/executable_provider.h"
#include "cache/remote_provider.h"
#include "compiler/fingerprint.h"
#include "compiler/compile_request.h"
#include "compiler/host/host_target.h"
#include "compiler/host/native_build.h"
#include "ir/printer.h"
#include "lazy/compile_pool.h"
#include "lazy/execution_mode.h"
#include "base/profiler.h"
#include "runtime/torch_status.h"
#include "service/client.h"

// Where executables come from is the cache/ provider chain's business; this file
// builds the chain from the config, asks it for each graph, and observes compiles
// (the TORCH_NEURON_DEBUG recompile report, TORCH_NEURON_DEBUG_DIR dumps, the
// tier-1 fallback warning).

namespace torch_neuron::lazy {
namespace {

// What the recompile report compares between two graphs from one place.
struct GraphSignature {
  ir::hash_t hash = 0;
  std::vector<std::string> parameters;  // shape text per parameter
  std::vector<std::string> ops;         // op and shape per node
  // The same without sizes: two graphs equal in these differ only in sizes.
  std::vector<std::string> parameter_kinds;  // kind and dtype per parameter
  std::vector<std::string> op_names;         // op and dtype per node
};

GraphSignature SignatureOf(const ir::CanonicalGraph& g) {
  GraphSignature s;
  s.hash = g.hash;
  for (int32_t p : g.parameters) {
    const ir::Node& n = *g.nodes[p];
    s.parameters.push_back(absl::StrCat(ir::NodeKindName(n.kind()), " ", n.shape().ToString()));
    s.parameter_kinds.push_back(
        absl::StrCat(ir::NodeKindName(n.kind()), " ", ir::DtypeShortName(n.shape().dtype())));
  }
  for (const ir::Node* n : g.nodes) {
    if (n->is_parameter()) continue;
    s.ops.push_back(absl::StrCat(n->op(), " ", n->shape().ToString()));
    s.op_names.push_back(absl::StrCat(n->op(), " ", ir::DtypeShortName(n->shape().dtype())));
  }
  return s;
}

// Items of `a` missing from `b`, as a multiset, in a's order.
std::vector<std::string> Missing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::map<std::string, int> count;
  for (const std::string& x : b) ++count[x];
  std::vector<std::string> out;
  for (const std::string& x : a) {
    if (count[x] > 0) {
      --count[x];
    } else {
      out.push_back(x);
    }
  }
  return out;
}

std::string Listed(const std::vector<std::string>& items) {
  constexpr size_t kMax = 4;
  std::vector<std::string> shown(items.begin(), items.begin() + std::min(items.size(), kMax));
  std::string text = absl::StrJoin(shown, ", ");
  if (items.size() > kMax) absl::StrAppend(&text, " and ", items.size() - kMax, " more");
  return text;
}

// Names what differs between two graphs compiled at one place: the inputs whose
// dtype or shape changed, else the ops that came or went.
std::string DescribeChange(const GraphSignature& before, const GraphSignature& after) {
  std::vector<std::string> changes;
  std::vector<std::string> gone = Missing(before.parameters, after.parameters);
  std::vector<std::string> came = Missing(after.parameters, before.parameters);
  if (!gone.empty() && gone.size() == came.size()) {
    for (size_t i = 0; i < gone.size() && i < 4; ++i) {
      changes.push_back(absl::StrCat("input changed from ", gone[i], " to ", came[i]));
    }
  } else if (!gone.empty() || !came.empty()) {
    if (!gone.empty()) changes.push_back(absl::StrCat("inputs no longer taken: ", Listed(gone)));
    if (!came.empty()) changes.push_back(absl::StrCat("new inputs: ", Listed(came)));
  }
  if (changes.empty()) {
    std::vector<std::string> ops_gone = Missing(before.ops, after.ops);
    std::vector<std::string> ops_came = Missing(after.ops, before.ops);
    if (!ops_gone.empty()) changes.push_back(absl::StrCat("ops gone: ", Listed(ops_gone)));
    if (!ops_came.empty()) changes.push_back(absl::StrCat("new ops: ", Listed(ops_came)));
  }
  if (changes.empty()) changes.push_back("only attribute values or the wiring differ");
  // The same ops on inputs of the same kinds, only sizes differ: a loop whose
  // tensors grow or change length compiles once per size. Name the fixes.
  // (As multisets: the canonical order follows hashes, which cover sizes.)
  auto same = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
    return a.size() == b.size() && Missing(a, b).empty();
  };
  const bool sizes_differ = !same(before.parameters, after.parameters) || !same(before.ops, after.ops);
  if (sizes_differ && same(before.parameter_kinds, after.parameter_kinds) &&
      same(before.op_names, after.op_names)) {
    changes.push_back(
        "only sizes differ, so every new size compiles a new graph: keep the sizes fixed (for generate(), "
        "cache_implementation=\"static\"; elsewhere, pad to a few lengths), set "
        "TORCH_NEURON_DYNAMIC_SHAPES=1 "
        "(one tier-0 graph for every size) or compile the code with torch.compile(backend=\"neuron\", "
        "dynamic=True)");
  }
  return absl::StrJoin(changes, "; ");
}

class RecompileLog {
 public:
  // Records a compiled graph from `place`; returns the reason it differs from the
  // previous graph of that place ("" for the first graph there).
  std::string Record(const std::string& place, GraphSignature signature) {
    absl::MutexLock lock(&mu_);
    std::string reason;
    auto it = last_.find(place);
    if (it != last_.end() && it->second.hash != signature.hash) {
      reason = DescribeChange(it->second, signature);
    }
    last_[place] = std::move(signature);
    last_reason_ = reason;
    return reason;
  }
  std::string LastReason() const {
    absl::MutexLock lock(&mu_);
    return last_reason_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, GraphSignature> last_ ABSL_GUARDED_BY(mu_);
  std::string last_reason_ ABSL_GUARDED_BY(mu_);
};

RecompileLog& Log() {
  static auto* log = new RecompileLog();
  return *log;
}

void DumpGraph(const std::string& dir, const ir::CanonicalGraph& g, const std::string& optimized,
               const std::string& kernel_sources) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = absl::StrCat(dir, "/graph-", ir::HashToHex(g.hash), ".txt");
  std::ofstream out(path);
  out << "# torch_neuron graph " << ir::HashToHex(g.hash) << " (" << g.size() << " nodes)\n"
      << ir::ToText(g) << "# after the compiler's passes\n"
      << optimized;
  if (!kernel_sources.empty()) {
    std::ofstream(absl::StrCat(dir, "/graph-", ir::HashToHex(g.hash), ".kernels.cc")) << kernel_sources;
  }
}

// Compile events, as the user sees them. The recompile report and the dumps
// read the graph back from the request (the live IR may be gone: a background
// compile outlives its sync).
void ObserveCompile(const cache::CompileEvent& event) {
  const compiler::CompileResult& result = event.result;
  if (!result.tier1_error.empty()) {
    // Tier 0 runs every graph tier 1 fuses: the graph runs, slower; say so once.
    TORCH_WARN_ONCE(
        "torch_neuron: tier-1 kernels did not build, running graphs at tier 0 "
        "(counted in compile.tier1_fallback.count): ",
        result.tier1_error);
  }
  const Config& config = GlobalConfig();
  const bool report = config.debug && !event.request.background;
  if (!report && config.debug_dir.empty()) return;
  absl::StatusOr<std::unique_ptr<compiler::RequestGraph>> read =
      compiler::ReadCompileRequest(*event.request.compile);
  if (!read.ok()) return;  // it compiled, so it reads: never here
  const ir::CanonicalGraph& g = (*read)->graph;
  if (report) {
    std::string place = CurrentSourceLocation();
    if (place.empty()) place = "<unknown>";
    std::string reason = Log().Record(place, SignatureOf(g));
    if (!reason.empty()) {
      std::fprintf(stderr, "torch_neuron: compiling a new graph (%lld nodes) at %s: %s\n",
                   static_cast<long long>(g.size()), place.c_str(), reason.c_str());
    }
  }
  if (!config.debug_dir.empty()) DumpGraph(config.debug_dir, g, result.optimized_text, result.kernel_sources);
}

struct Providers {
  cache::ProviderChain chain;
  cache::MemoryProvider* memory;
};

// The chain of the process, built once from the config: memory, then disk
// (unless TORCH_NEURON_CACHE=0), then the compile service (unless
// TORCH_NEURON_COMPILE_SERVICE=off), which reads and writes Redis
// (TORCH_NEURON_REMOTE_CACHE) for its clients, then the compiler here. Without
// a service, or when it cannot answer, Redis is asked from this process. With
// no service below the disk, the disk's key lock is held across the compile, so
// one process compiles a graph and the others load its NEFF.
Providers& TheProviders() {
  static Providers* providers = [] {
    const Config& config = GlobalConfig();
    std::vector<std::unique_ptr<cache::ExecutableProvider>> chain;
    auto memory = std::make_unique<cache::MemoryProvider>(static_cast<size_t>(config.cache_memory_entries),
                                                          static_cast<size_t>(config.cache_memory_mb) << 20);
    cache::MemoryProvider* memory_ptr = memory.get();
    chain.push_back(std::move(memory));
    const bool service = config.compile_service != "off";
    const std::string dir = config.cache_dir.empty() ? cache::DefaultCacheDir() : config.cache_dir;
    if (config.cache_enabled) {
      auto* disk = new cache::DiskCache(dir, config.cache_max_mb << 20,
                                        config.cache_read_only);  // lives as long as the chain
      // The service coordinates processes itself: the key lock is then held
      // only around the re-check and the write.
      chain.push_back(std::make_unique<cache::DiskProvider>(disk, /*lock_until_kept=*/!service));
    }
    std::unique_ptr<cache::ExecutableProvider> remote;
    std::string remote_url;
    if (!config.remote_cache.empty()) {
      absl::StatusOr<cache::RedisAddress> address = cache::ParseRedisUrl(config.remote_cache);
      if (address.ok()) {
        remote = std::make_unique<cache::RemoteProvider>(*std::move(address), config.remote_cache_key);
        remote_url = config.remote_cache;
      } else {
        TORCH_WARN_ONCE("torch_neuron: ", address.status().message(), "; no remote compile cache");
      }
    }
    if (service) {
      service::ClientOptions options;
      options.mode = config.compile_service;
      options.cache_dir = dir;
      options.toolchain = config.cxx;
      options.timeout_s = config.service_timeout_s;
      options.remote_cache = remote_url;
      options.remote_cache_key = config.remote_cache_key;
      chain.push_back(std::make_unique<service::ServiceProvider>(std::move(options), std::move(remote)));
    } else if (remote != nullptr) {
      chain.push_back(std::move(remote));
    }
    auto compile = std::make_unique<cache::LocalCompileProvider>();
    compile->AddObserver(ObserveCompile);
    chain.push_back(std::move(compile));
    return new Providers{cache::ProviderChain(std::move(chain)), memory_ptr};
  }();
  return *providers;
}

}  // namespace

// The kernel objects this process's compiles share (beside the disk cache, so
// that processes share them too; memory only without a writable disk cache).
compiler::KernelObjectCache* ProcessKernelObjects() {
  static compiler::KernelObjectCache* objects = [] {
    const Config& config = GlobalConfig();
    const bool disk = config.cache_enabled && !config.cache_read_only;
    const std::string dir = config.cache_dir.empty() ? cache::DefaultCacheDir() : config.cache_dir;
    // A tenth of the disk cache's bound (1 GiB by default).
    return new compiler::KernelObjectCache(disk ? dir + "/kernels" : "", 4096,
                                           (config.cache_max_mb << 20) / 10);
  }();
  return objects;
}

namespace {

// The host target of C++ compiler `cxx`, one per compiler named in this
// process's life (tests change CXX), sharing the process's kernel objects.
const compiler::Target* HostTargetFor(const std::string& cxx) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* targets = new std::map<std::string, std::unique_ptr<const compiler::HostTarget>>();
  absl::MutexLock lock(&mu);
  std::unique_ptr<const compiler::HostTarget>& slot = (*targets)[cxx];
  if (slot == nullptr) slot = std::make_unique<compiler::HostTarget>(cxx, ProcessKernelObjects());
  return slot.get();
}

}  // namespace

CompileSettings CurrentCompileSettings() {
  const Config& config = GlobalConfig();
  CompileSettings settings;
  settings.options.opt_level = config.opt_level;
  settings.options.fault_op = config.test_fault_op;
  thread_local std::string last_cxx;
  thread_local const compiler::Target* last_target = nullptr;
  if (last_target == nullptr || last_cxx != config.cxx) {
    last_target = HostTargetFor(config.cxx);
    last_cxx = config.cxx;
  }
  settings.target = last_target;
  return settings;
}

const proto::CompilerFingerprint& CurrentFingerprint() {
  const CompileSettings settings = CurrentCompileSettings();
  return compiler::FingerprintFor(settings.options, *settings.target).fingerprint;
}

namespace {

// The request for `g` under `settings`: its key, without the graph (a memory
// hit needs no more). The fingerprint is serialized and hashed once per
// option set and target, and looked up again only when the settings of this
// thread's requests change.
cache::ExecutableRequest RequestFor(const ir::CanonicalGraph& g, const CompileSettings& settings) {
  cache::ExecutableRequest request;
  request.options = settings.options;
  request.target = settings.target;
  thread_local int last_level = -1;
  thread_local const compiler::Target* last_target = nullptr;
  thread_local std::string last_fault_op;
  thread_local const compiler::KeyedFingerprint* last = nullptr;
  if (last == nullptr || last_level != request.options.opt_level || last_target != request.target ||
      last_fault_op != request.options.fault_op) {
    last = &compiler::FingerprintFor(request.options, *request.target);
    last_level = request.options.opt_level;
    last_target = request.target;
    last_fault_op = request.options.fault_op;
  }
  request.key = compiler::CacheKey(g.hash, last->hash);
  request.fingerprint = &last->fingerprint;
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

}  // namespace

namespace {

// The program of `request` (whose key is `g`'s): a memory hit as is; on a
// miss, the chain asked with `g`'s CompileRequest.
absl::StatusOr<std::shared_ptr<const runtime::Program>> Provide(const ir::CanonicalGraph& g,
                                                                cache::ExecutableRequest& request,
                                                                bool* compiled) {
  if (compiled != nullptr) *compiled = false;
  cache::ProviderChain& chain = TheProviders().chain;
  if (std::shared_ptr<const runtime::Program> program = chain.Lookup(request)) return program;
  if (absl::Status made = AddCompileRequest(g, request); !made.ok()) return made;
  absl::StatusOr<cache::ProviderChain::Answer> answer = chain.Get(request);
  if (!answer.ok()) return answer.status();
  for (const absl::Status& error : answer->keep_errors) {
    TORCH_WARN_ONCE("torch_neuron: ", error.message(), "; continuing without it");
  }
  if (compiled != nullptr) *compiled = answer->source == "compile" && !answer->waited;
  return answer->program;
}

// Tiered compilation: what the process knows about tier-1 programs being
// built in the background, by cache key.
struct TierMetrics {
  // Syncs that ran a tier-0 stand-in while the graph's tier-1 program compiled.
  metrics::Counter* stand_ins = metrics::GetCounter("compile.tiered.stand_in.count");
  metrics::Counter* queued = metrics::GetCounter("compile.tiered.background.count");
  metrics::Counter* background_ns = metrics::GetCounter("compile.tiered.background.ns");
  metrics::Counter* failed = metrics::GetCounter("compile.tiered.background_failed.count");
};

const TierMetrics& TierCounters() {
  static const TierMetrics* counters = new TierMetrics();
  return *counters;
}

enum class TierState {
  kUnknown,    // never asked: look in the persistent levels, then queue tier 1
  kCompiling,  // tier 1 is queued or compiling: run the stand-in
  kFailed,     // tier 1 failed in the background: the stand-in runs for good
};

class TierTable {
 public:
  TierState Get(ir::hash_t key) {
    absl::MutexLock lock(&mu_);
    auto it = states_.find(key);
    return it == states_.end() ? TierState::kUnknown : it->second;
  }
  // Sets kCompiling unless the key has a state; true when this call set it.
  bool Claim(ir::hash_t key) {
    absl::MutexLock lock(&mu_);
    return states_.try_emplace(key, TierState::kCompiling).second;
  }
  void Set(ir::hash_t key, TierState state) {
    absl::MutexLock lock(&mu_);
    states_[key] = state;
  }
  // A compiled tier 1 is found by later lookups (memory, then disk).
  void Done(ir::hash_t key) {
    absl::MutexLock lock(&mu_);
    states_.erase(key);
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<ir::hash_t, TierState> states_ ABSL_GUARDED_BY(mu_);
};

TierTable& Tiers() {
  static auto* table = new TierTable();
  return *table;
}

CompilePool& BackgroundPool() {
  static auto* pool = new CompilePool("tier-1 compile");
  return *pool;
}

// Queues the tier-1 compile of `request` (its CompileRequest owns what the
// compile needs: the sync that asked releases its IR before the compile ends).
void QueueTier1(cache::ExecutableRequest request) {
  TierCounters().queued->Add(1);
  request.background = true;
  BackgroundPool().Submit([request = std::move(request)] {
    profiler::Scope scope("compile", [&] {
      return absl::StrCat("tier 1 of graph ", request.KeyHex().substr(0, 16), " (",
                          request.compile->nodes_size(), " nodes)");
    });
    const auto start = std::chrono::steady_clock::now();
    bool ok = false;
    try {
      ok = TheProviders().chain.Get(request).ok();
    } catch (...) {
      ok = false;  // the stand-in keeps running; counted below
    }
    TierCounters().background_ns->Add(metrics::NanosSince(start));
    if (ok) {
      Tiers().Done(request.key);
    } else {
      TierCounters().failed->Add(1);
      Tiers().Set(request.key, TierState::kFailed);
    }
  });
}

}  // namespace

absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompile(const ir::CanonicalGraph& g,
                                                                      bool* compiled) {
  return FindOrCompileWith(g, CurrentCompileSettings(), compiled);
}

absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileWith(const ir::CanonicalGraph& g,
                                                                          const CompileSettings& settings,
                                                                          bool* compiled) {
  cache::ExecutableRequest request = RequestFor(g, settings);
  return Provide(g, request, compiled);
}

namespace {

bool Tiered(const compiler::CompileOptions& options) {
  return GlobalConfig().tiered_compile && options.opt_level >= 1;
}

// The memory-only request of the tier-0 stand-in of `tier1`'s graph, sharing
// its CompileRequest when it has one.
cache::ExecutableRequest StandInRequest(const ir::CanonicalGraph& g, const cache::ExecutableRequest& tier1) {
  CompileSettings settings{tier1.options, tier1.target};
  settings.options.opt_level = 0;
  cache::ExecutableRequest request = RequestFor(g, settings);
  request.compile = tier1.compile;
  request.stand_in = true;
  return request;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileTiered(const ir::CanonicalGraph& g,
                                                                            bool* compiled) {
  return FindOrCompileTieredWith(g, CurrentCompileSettings(), compiled);
}

absl::StatusOr<std::shared_ptr<const runtime::Program>> FindOrCompileTieredWith(
    const ir::CanonicalGraph& g, const CompileSettings& settings, bool* compiled) {
  if (!Tiered(settings.options)) return FindOrCompileWith(g, settings, compiled);
  if (compiled != nullptr) *compiled = false;
  cache::ExecutableRequest request = RequestFor(g, settings);
  cache::ProviderChain& chain = TheProviders().chain;
  if (std::shared_ptr<const runtime::Program> program = chain.Lookup(request)) return program;
  const TierState state = Tiers().Get(request.key);
  if (state == TierState::kUnknown) {
    request.stored_only = true;
    absl::StatusOr<cache::ProviderChain::Answer> stored = chain.Get(request);
    if (stored.ok()) return stored->program;
    request.stored_only = false;
    if (Tiers().Claim(request.key)) {
      if (absl::Status made = AddCompileRequest(g, request); !made.ok()) {
        Tiers().Done(request.key);
        return made;
      }
      QueueTier1(request);
    }
  }
  // kCompiling, kFailed, or kUnknown again (tier 1 finished meanwhile: the
  // stand-in is already cheaper to get than a disk read).
  TierCounters().stand_ins->Add(1);
  cache::ExecutableRequest stand_in = StandInRequest(g, request);
  return Provide(g, stand_in, compiled);
}

void WaitForBackgroundCompiles() { BackgroundPool().WaitIdle(); }

void DropQueuedBackgroundCompiles() { BackgroundPool().DropQueued(); }

ir::hash_t ExecutableKey(const ir::CanonicalGraph& g, const CompileSettings& settings) {
  return RequestFor(g, settings).key;
}

std::shared_ptr<const runtime::Program> FindInMemory(const ir::CanonicalGraph& g) {
  const CompileSettings settings = CurrentCompileSettings();
  const cache::ExecutableRequest request = RequestFor(g, settings);
  cache::ProviderChain& chain = TheProviders().chain;
  if (std::shared_ptr<const runtime::Program> program = chain.Lookup(request)) return program;
  if (!Tiered(settings.options)) return nullptr;
  const TierState state = Tiers().Get(request.key);
  if (state != TierState::kCompiling && state != TierState::kFailed) return nullptr;
  std::shared_ptr<const runtime::Program> stand_in = chain.Lookup(StandInRequest(g, request));
  if (stand_in != nullptr) TierCounters().stand_ins->Add(1);
  return stand_in;
}

std::string LastRecompileReason() { return Log().LastReason(); }

void ClearMemoryCache() { TheProviders().memory->Clear(); }

}  // namespace torch_neuron::lazy

#include "lazy/executable_cache.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/config.h"
#include "base/metrics.h"
#include "cache/disk_cache.h"
#include "cache/lru_cache.h"
#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "ir/printer.h"
#include "lazy/execution_mode.h"
#include "neff/neff_reader.h"
#include "neff/neff_writer.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

using Clock = std::chrono::steady_clock;

using metrics::NanosSince;

struct CompileMetrics {
  metrics::Counter* compiles = metrics::GetCounter("graph.compile.count");
  metrics::Counter* compile_ns = metrics::GetCounter("graph.compile.ns");
  metrics::Counter* compiled_nodes = metrics::GetCounter("graph.compile.nodes");
  metrics::Counter* cache_hits = metrics::GetCounter("graph.cache_hit.count");
  metrics::Counter* tier1_fallbacks = metrics::GetCounter("compile.tier1_fallback.count");
};

const CompileMetrics& CompileCounters() {
  static const CompileMetrics* counters = new CompileMetrics();
  return *counters;
}

// L1: loaded programs by cache key, bounded by count and by NEFF bytes.
cache::LruCache<ir::hash_t, runtime::Program>& ProgramCache() {
  static auto* cache = new cache::LruCache<ir::hash_t, runtime::Program>(4096, size_t{1} << 30);
  return *cache;
}

// L2: the disk cache of the config (nullptr when TORCH_NEURON_CACHE=0).
cache::DiskCache* DiskCacheOrNull() {
  static cache::DiskCache* disk = []() -> cache::DiskCache* {
    const Config& config = GlobalConfig();
    if (!config.cache_enabled) return nullptr;
    const std::string dir = config.cache_dir.empty() ? cache::DefaultCacheDir() : config.cache_dir;
    return new cache::DiskCache(dir, config.cache_max_mb << 20, config.cache_read_only);
  }();
  return disk;
}

struct CacheCounters {
  metrics::Counter* memory_hits = metrics::GetCounter("cache.memory_hit.count");
  metrics::Counter* disk_hits = metrics::GetCounter("cache.disk_hit.count");
  metrics::Counter* misses = metrics::GetCounter("cache.miss.count");
  metrics::Counter* load_ns = metrics::GetCounter("cache.load.ns");
  metrics::Counter* store_errors = metrics::GetCounter("cache.store_error.count");
};
const CacheCounters& CC() {
  static const CacheCounters* c = new CacheCounters();
  return *c;
}

// The program of a disk entry, if present and valid.
std::shared_ptr<const runtime::Program> LoadFromDisk(cache::DiskCache& disk, const std::string& key) {
  auto start = Clock::now();
  std::shared_ptr<const runtime::Program> program;
  disk.Load(key, [&](std::string_view bytes) -> absl::Status {
    absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(bytes, &CurrentFingerprint());
    if (!loaded.ok()) return loaded.status();
    program = loaded->program;
    return absl::OkStatus();
  });
  if (program != nullptr) CC().load_ns->Add(NanosSince(start));
  return program;
}

proto::Signature SignatureFor(const ir::CanonicalGraph& g) {
  proto::Signature s;
  std::vector<int64_t> input_bytes;
  for (int32_t p : g.parameters) {
    const ir::Node* n = g.nodes[p];
    s.add_input_kinds(n->kind() == ir::NodeKind::kDeviceData ? proto::Signature::DEVICE_DATA
                      : n->kind() == ir::NodeKind::kGenerator ? proto::Signature::GENERATOR
                                                               : proto::Signature::SCALAR);
    proto::TensorSpec* spec = s.add_inputs();
    spec->set_dtype(static_cast<int32_t>(n->shape().dtype()));
    for (int64_t d : n->shape().sizes()) spec->add_sizes(d);
    input_bytes.push_back(n->kind() == ir::NodeKind::kDeviceData
                              ? n->shape().numel() * static_cast<int64_t>(c10::elementSize(n->shape().dtype()))
                              : -1);
  }
  for (const auto& [node, index] : g.outputs) {
    const ir::Shape& shape = g.nodes[node]->shape(index);
    proto::TensorSpec* spec = s.add_outputs();
    spec->set_dtype(static_cast<int32_t>(shape.dtype()));
    for (int64_t d : shape.sizes()) spec->add_sizes(d);
    proto::DonationCandidates* donation = s.add_donations();
    const int64_t bytes = shape.numel() * static_cast<int64_t>(c10::elementSize(shape.dtype()));
    for (size_t i = 0; i < input_bytes.size(); ++i) {
      if (input_bytes[i] == bytes && bytes > 0) donation->add_inputs(static_cast<int32_t>(i));
    }
  }
  return s;
}

// What the recompile report compares between two graphs from one place.
struct GraphSignature {
  ir::hash_t hash = 0;
  std::vector<std::string> parameters;  // shape text per parameter
  std::vector<std::string> ops;         // op and shape per node
};

GraphSignature SignatureOf(const ir::CanonicalGraph& g) {
  GraphSignature s;
  s.hash = g.hash;
  for (int32_t p : g.parameters) {
    s.parameters.push_back(absl::StrCat(ir::NodeKindName(g.nodes[p]->kind()), " ",
                                        g.nodes[p]->shape().ToString()));
  }
  for (const ir::Node* n : g.nodes) {
    if (!n->is_parameter()) s.ops.push_back(absl::StrCat(n->op(), " ", n->shape().ToString()));
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
      << ir::ToText(g) << "# after the compiler's passes\n" << optimized;
  if (!kernel_sources.empty()) {
    std::ofstream(absl::StrCat(dir, "/graph-", ir::HashToHex(g.hash), ".kernels.cc")) << kernel_sources;
  }
}

// Compiles `g`; with a writable disk cache, also stores its NEFF under `key`.
// Returns the program and its NEFF size (0 when not serialized).
std::pair<std::shared_ptr<const runtime::Program>, size_t> CompileGraph(
    const ir::CanonicalGraph& g, cache::DiskCache* disk, const std::string& key) {
  const Config& config = GlobalConfig();
  auto start = Clock::now();
  absl::StatusOr<compiler::CompileResult> result = compiler::Compile(g, CurrentCompileOptions());
  runtime::ThrowIfError(result.status());
  if (!result->tier1_error.empty()) {
    // Tier 0 runs every graph tier 1 fuses: the graph runs, slower; say so once.
    CompileCounters().tier1_fallbacks->Add(1);
    static bool warned = false;
    if (!warned) {
      warned = true;
      std::fprintf(stderr, "torch_neuron: warning: tier-1 kernels did not build, running graphs "
                   "at tier 0 (counted in compile.tier1_fallback.count): %s\n",
                   result->tier1_error.c_str());
    }
  }
  size_t neff_bytes = 0;
  std::shared_ptr<const runtime::Program> program = result->program;
  absl::StatusOr<std::string> neff = neff::WriteNeff(
      {result->program.get(), CurrentFingerprint(), g.hash, SignatureFor(g)});
  if (neff.ok()) {
    // What runs is what the reader makes of the NEFF, as for an entry loaded
    // from disk: a program the reader rejects is a compiler bug, reported as
    // the graph's error, and never reaches the cache.
    absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(*neff, &CurrentFingerprint());
    if (!loaded.ok()) {
      runtime::ThrowIfError(absl::InternalError(absl::StrCat(
          "the compiler produced an executable its reader rejects (", loaded.status().message(),
          "); graph ", ir::HashToHex(g.hash))));
    }
    program = loaded->program;
    neff_bytes = neff->size();
    // A tier-0 fallback stays out of the disk cache: under the tier-1 key it
    // would outlive the broken toolchain that caused it.
    if (disk != nullptr && !disk->read_only() && result->tier1_error.empty()) {
      absl::Status stored = disk->Store(key, *neff);
      if (!stored.ok()) {
        CC().store_errors->Add(1);
        static bool warned = false;
        if (!warned) {
          warned = true;
          std::fprintf(stderr, "torch_neuron: warning: cannot write the compile cache (%s); "
                       "continuing without it\n", std::string(stored.message()).c_str());
        }
      }
    }
  }
  CompileCounters().compiles->Add(1);
  CompileCounters().compile_ns->Add(NanosSince(start));
  CompileCounters().compiled_nodes->Add(g.size());
  if (config.debug) {
    std::string place = CurrentSourceLocation();
    if (place.empty()) place = "<unknown>";
    std::string reason = Log().Record(place, SignatureOf(g));
    if (!reason.empty()) {
      std::fprintf(stderr, "torch_neuron: compiling a new graph (%lld nodes) at %s: %s\n",
                   static_cast<long long>(g.size()), place.c_str(), reason.c_str());
    }
  }
  if (!config.debug_dir.empty()) {
    DumpGraph(config.debug_dir, g, result->optimized_text, result->kernel_sources);
  }
  return {program, neff_bytes};
}

// L1, then L2, then compile (under the key's cross-process lock, so one process
// compiles a graph and the others load its NEFF).
}  // namespace

compiler::CompileOptions CurrentCompileOptions() {
  compiler::CompileOptions options;
  options.opt_level = GlobalConfig().opt_level;
  return options;
}

const proto::CompilerFingerprint& CurrentFingerprint() {
  return compiler::FingerprintFor(GlobalConfig().opt_level);
}

std::shared_ptr<const runtime::Program> FindOrCompile(const ir::CanonicalGraph& g, bool* compiled) {
  if (compiled != nullptr) *compiled = false;
  // Each level's fingerprint is serialized and hashed once, not on every sync.
  static const ir::hash_t fingerprint_hashes[2] = {
      compiler::HashFingerprint(compiler::FingerprintFor(0)),
      compiler::HashFingerprint(compiler::FingerprintFor(1))};
  const ir::hash_t key =
      compiler::CacheKey(g.hash, fingerprint_hashes[GlobalConfig().opt_level >= 1 ? 1 : 0]);
  if (auto program = ProgramCache().Get(key)) {
    CompileCounters().cache_hits->Add(1);
    CC().memory_hits->Add(1);
    return program;
  }
  const std::string hex = ir::HashToHex(key);
  cache::DiskCache* disk = DiskCacheOrNull();
  std::unique_ptr<cache::DiskCache::KeyLock> lock;
  if (disk != nullptr) {
    if (auto program = LoadFromDisk(*disk, hex)) {
      CC().disk_hits->Add(1);
      ProgramCache().Put(key, program);
      return program;
    }
    absl::StatusOr<std::unique_ptr<cache::DiskCache::KeyLock>> locked = disk->LockKey(hex, 600.0);
    if (locked.ok()) {
      lock = *std::move(locked);
      // Another process may have compiled it while we waited.
      if (auto program = LoadFromDisk(*disk, hex)) {
        CC().disk_hits->Add(1);
        ProgramCache().Put(key, program);
        return program;
      }
    }
  }
  CC().misses->Add(1);
  auto [program, bytes] = CompileGraph(g, disk, hex);
  if (compiled != nullptr) *compiled = true;
  ProgramCache().Put(key, program, bytes);
  return program;
}

std::string LastRecompileReason() { return Log().LastReason(); }

void ClearMemoryCache() { ProgramCache().Clear(); }

}  // namespace torch_neuron::lazy

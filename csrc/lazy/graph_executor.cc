#include "lazy/graph_executor.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/config.h"
#include "base/metrics.h"
#include "cache/disk_cache.h"
#include "cache/lru_cache.h"
#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "neff/neff_reader.h"
#include "neff/neff_writer.h"
#include "ir/printer.h"
#include "lazy/execution_mode.h"
#include "runtime/device_registry.h"
#include "runtime/execution_queue.h"
#include "runtime/executor.h"
#include "runtime/generator.h"
#include "runtime/torch_status.h"

namespace torch_neuron::lazy {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

struct Counters {
  metrics::Counter* mark_steps = metrics::GetCounter("mark_step.count");
  metrics::Counter* syncs = metrics::GetCounter("graph.sync.count");
  metrics::Counter* compiles = metrics::GetCounter("graph.compile.count");
  metrics::Counter* compile_ns = metrics::GetCounter("graph.compile.ns");
  metrics::Counter* compiled_nodes = metrics::GetCounter("graph.compile.nodes");
  metrics::Counter* cache_hits = metrics::GetCounter("graph.cache_hit.count");
  metrics::Counter* executions = metrics::GetCounter("graph.execute.count");
  metrics::Counter* executed_nodes = metrics::GetCounter("graph.execute.nodes");
  metrics::Counter* execute_ns = metrics::GetCounter("graph.execute.ns");
  metrics::Counter* execute_errors = metrics::GetCounter("graph.execute.errors");
  metrics::Counter* prepare_ns = metrics::GetCounter("graph.prepare.ns");
  metrics::Counter* donated_bytes = metrics::GetCounter("graph.donated.bytes");
};

const Counters& C() {
  static const Counters* counters = new Counters();
  return *counters;
}

// L1: loaded programs by cache key, bounded by count and by NEFF bytes.
cache::LruCache<ir::hash_t, runtime::Program>& ProgramCache() {
  static auto* cache = new cache::LruCache<ir::hash_t, runtime::Program>(4096, size_t{1} << 30);
  return *cache;
}

const proto::CompilerFingerprint& Fingerprint() {
  static const auto* fingerprint =
      new proto::CompilerFingerprint(compiler::MakeFingerprint(compiler::CompileOptions()));
  return *fingerprint;
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
    absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(bytes, &Fingerprint());
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

void DumpGraph(const std::string& dir, const ir::CanonicalGraph& g, const std::string& optimized) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = absl::StrCat(dir, "/graph-", ir::HashToHex(g.hash), ".txt");
  std::ofstream out(path);
  out << "# torch_neuron graph " << ir::HashToHex(g.hash) << " (" << g.size() << " nodes)\n"
      << ir::ToText(g) << "# after the compiler's passes\n" << optimized;
}

// Compiles `g`; with a writable disk cache, also stores its NEFF under `key`.
// Returns the program and its NEFF size (0 when not serialized).
std::pair<std::shared_ptr<const runtime::Program>, size_t> CompileGraph(
    const ir::CanonicalGraph& g, cache::DiskCache* disk, const std::string& key) {
  const Config& config = GlobalConfig();
  auto start = Clock::now();
  absl::StatusOr<compiler::CompileResult> result = compiler::Compile(g, compiler::CompileOptions());
  runtime::ThrowIfError(result.status());
  size_t neff_bytes = 0;
  absl::StatusOr<std::string> neff = neff::WriteNeff(
      {result->program.get(), Fingerprint(), g.hash, SignatureFor(g)});
  if (neff.ok()) {
    neff_bytes = neff->size();
    if (disk != nullptr && !disk->read_only()) {
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
  C().compiles->Add(1);
  C().compile_ns->Add(NanosSince(start));
  C().compiled_nodes->Add(g.size());
  if (config.debug) {
    std::string place = CurrentSourceLocation();
    if (place.empty()) place = "<unknown>";
    std::string reason = Log().Record(place, SignatureOf(g));
    if (!reason.empty()) {
      std::fprintf(stderr, "torch_neuron: compiling a new graph (%lld nodes) at %s: %s\n",
                   static_cast<long long>(g.size()), place.c_str(), reason.c_str());
    }
  }
  if (!config.debug_dir.empty()) DumpGraph(config.debug_dir, g, result->optimized_text);
  return {result->program, neff_bytes};
}

// L1, then L2, then compile (under the key's cross-process lock, so one process
// compiles a graph and the others load its NEFF).
std::shared_ptr<const runtime::Program> FindOrCompile(const ir::CanonicalGraph& g) {
  const ir::hash_t key = compiler::CacheKey(g.hash, Fingerprint());
  if (auto program = ProgramCache().Get(key)) {
    C().cache_hits->Add(1);
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
  ProgramCache().Put(key, program, bytes);
  return program;
}

// Runs on the device's queue.
absl::Status RunGraph(const std::shared_ptr<const runtime::Program>& program,
                      std::vector<c10::IValue> params,
                      std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs,
                      const std::vector<runtime::DeviceDataPtr>& outputs) {
  auto start = Clock::now();
  auto fail_all = [&](const absl::Status& status) {
    for (const auto& out : outputs) out->Fail(status);
    C().execute_errors->Add(1);
    return status;
  };
  for (const auto& [slot, data] : inputs) {
    absl::Status status = data->Wait();
    if (!status.ok()) return fail_all(status);
    params[slot] = data->DeviceView();
  }
  absl::StatusOr<std::vector<at::Tensor>> results = runtime::Execute(*program, params);
  if (!results.ok()) return fail_all(results.status());
  // Counted before the outputs become readable, so a reader sees the count.
  C().executions->Add(1);
  C().executed_nodes->Add(program->num_nodes);
  // Donation: an input buffer that only this execution still holds (its tensor
  // took a new value, like a parameter updated in place) receives an output of
  // the same size instead of a new allocation.
  params.clear();  // drop the views of the input buffers
  std::vector<runtime::DeviceDataPtr> donors;
  for (const auto& [slot, data] : inputs) {
    if (data.use_count() == 1 && data->nbytes() > 0) donors.push_back(data);
  }
  absl::Status first_error;
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto donor = std::find_if(donors.begin(), donors.end(), [&](const runtime::DeviceDataPtr& d) {
      return d != nullptr && d->nbytes() == outputs[i]->nbytes();
    });
    if (donor != donors.end()) {
      C().donated_bytes->Add(static_cast<int64_t>((*donor)->nbytes()));
      outputs[i]->FulfillInto((*donor)->TakeBuffer(), (*results)[i]);
      *donor = nullptr;
    } else {
      outputs[i]->Fulfill((*results)[i]);
    }
    absl::Status s = outputs[i]->Wait();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  C().execute_ns->Add(NanosSince(start));
  return first_error;
}

}  // namespace

GraphExecutor& GraphExecutor::Get() {
  static GraphExecutor* executor = [] {
    auto* e = new GraphExecutor();
    // Reseeding or reading a neuron generator first runs the random ops traced
    // so far, so they draw from the state they were traced against.
    runtime::SetGeneratorSyncHook([e](c10::DeviceIndex device) {
      const int count = runtime::DeviceRegistry::Global().device_count();
      if (device < 0 || device >= count) return;
      std::vector<LazyTensorPtr> pending = PendingTensors(device);
      if (!pending.empty() || HasPendingDraws(device)) e->SyncDevice(device, pending);
      e->WaitDevice(device);
    });
    return e;
  }();
  return *executor;
}

void GraphExecutor::Sync(const std::vector<LazyTensorPtr>& tensors) {
  std::map<int, std::vector<LazyTensorPtr>> by_device;
  for (const LazyTensorPtr& t : tensors) {
    if (t && t->is_pending()) by_device[t->device()].push_back(t);
  }
  for (auto& [device, list] : by_device) SyncDevice(device, list);
}

void GraphExecutor::MarkStep(int device) {
  C().mark_steps->Add(1);
  const int count = runtime::DeviceRegistry::Global().device_count();
  for (int d = 0; d < count; ++d) {
    if (device >= 0 && d != device) continue;
    std::vector<LazyTensorPtr> pending = PendingTensors(d);
    if (!pending.empty() || HasPendingDraws(d)) {
      SyncDevice(d, pending);
    } else {
      runtime::ThrowIfError(runtime::ExecutionQueue::ForDevice(d).TakeError());
    }
  }
}

void GraphExecutor::WaitDevice(int device) {
  runtime::ExecutionQueue& queue = runtime::ExecutionQueue::ForDevice(device);
  queue.Drain();
  runtime::ThrowIfError(queue.TakeError());
}

void GraphExecutor::SyncDevice(int device, const std::vector<LazyTensorPtr>& tensors) {
  runtime::ExecutionQueue& queue = runtime::ExecutionQueue::ForDevice(device);
  runtime::ThrowIfError(queue.TakeError());
  C().syncs->Add(1);
  auto start = Clock::now();

  std::vector<ir::Value> roots;
  roots.reserve(tensors.size());
  for (const LazyTensorPtr& t : tensors) roots.push_back(t->pending());
  // Draws not yet run come along, first and in trace order, as outputs: their
  // results become the leaves later graphs read.
  std::vector<ir::NodePtr> draws = TakePendingDraws(device);
  std::vector<ir::Value> ordered;
  for (const ir::NodePtr& draw : draws) {
    if (!draw->materialized().empty()) continue;
    for (int k = 0; k < draw->num_outputs(); ++k) ordered.push_back(ir::Value{draw, k});
  }
  ir::CanonicalGraph g = ir::Canonicalize(roots, ordered);

  std::shared_ptr<const runtime::Program> program = FindOrCompile(g);

  std::vector<c10::IValue> params(g.parameters.size());
  std::vector<std::pair<size_t, runtime::DeviceDataPtr>> inputs;
  for (size_t i = 0; i < g.parameters.size(); ++i) {
    const ir::Node* n = g.nodes[g.parameters[i]];
    switch (n->kind()) {
      case ir::NodeKind::kDeviceData:
        inputs.emplace_back(i, static_cast<const DeviceDataLeaf*>(n->data().get())->data);
        break;
      case ir::NodeKind::kGenerator:
        params[i] = static_cast<const GeneratorLeaf*>(n->data().get())->generator;
        break;
      default:
        params[i] = n->scalar();
        break;
    }
  }
  std::vector<runtime::DeviceDataPtr> outputs;
  outputs.reserve(g.outputs.size());
  for (const auto& [node, index] : g.outputs) {
    const ir::Shape& shape = g.nodes[node]->shape(index);
    outputs.push_back(std::make_shared<runtime::DeviceData>(device, shape.dtype(), shape.sizes()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i]->SetData(outputs[g.root_to_output[i]]);
  for (size_t j = 0; j < ordered.size();) {
    const ir::NodePtr& draw = ordered[j].node;
    std::vector<ir::NodePtr> leaves;
    for (int k = 0; k < draw->num_outputs(); ++k, ++j) {
      const runtime::DeviceDataPtr& data = outputs[g.root_to_output[tensors.size() + j]];
      leaves.push_back(ir::Node::MakeDeviceData(draw->shape(k), std::make_shared<DeviceDataLeaf>(data)));
    }
    draw->set_materialized(std::move(leaves));
  }
  C().prepare_ns->Add(NanosSince(start));

  // The job owns the only references the graph keeps to its inputs; the IR
  // (and with it the leaves' references) is released once the tensors moved on.
  auto job = std::make_shared<std::tuple<std::vector<c10::IValue>,
                                         std::vector<std::pair<size_t, runtime::DeviceDataPtr>>>>(
      std::move(params), std::move(inputs));
  queue.Enqueue([program, job, outputs]() {
    return RunGraph(program, std::move(std::get<0>(*job)), std::move(std::get<1>(*job)), outputs);
  });
  if (CurrentMode() == ExecutionMode::kEager) WaitDevice(device);
}

ir::CanonicalGraph GraphExecutor::PendingGraph(const std::vector<LazyTensorPtr>& tensors) const {
  std::vector<ir::Value> roots;
  for (const LazyTensorPtr& t : tensors) {
    if (t && t->is_pending()) roots.push_back(t->pending());
  }
  return ir::Canonicalize(roots);
}

std::string GraphExecutor::LastRecompileReason() const { return Log().LastReason(); }

void GraphExecutor::ClearCache() { ProgramCache().Clear(); }

}  // namespace torch_neuron::lazy

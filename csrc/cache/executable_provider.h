#pragma once
// The ExecutableProvider chain (DESIGN.md "Seams", 1): where a graph's executable
// comes from. Providers are asked in order (memory, disk, ..., the local
// compiler); each answers with the executable, NOT_FOUND to pass the request on,
// UNAVAILABLE when it cannot answer now (the next one is asked: a dead compile
// service means "compile here"), or any other error, which ends the search. What
// a lower provider found is written back to the providers above it. Within a
// process a key is in flight once: a second thread asking for a key being
// provided waits for that answer and compiles nothing.
//
// Policy (bounds, which levels exist, locking) is decided when the chain is
// built (chain_assembly.h, from the cache sub-config), tiering by the decorator
// around it (tiered_chain.h); lazy/ only computes the key, writes the graph out
// as a CompileRequest on a miss, and asks.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cache/lru_cache.h"
#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "ir/hash.h"
#include "proto/compile_request.pb.h"
#include "proto/neff.pb.h"
#include "runtime/program.h"

namespace torch_neuron::cache {

class DiskCache;

// One graph to provide an executable for: its key, and on a miss the graph
// itself as a CompileRequest.
struct ExecutableRequest {
  ir::hash_t key = 0;  // graph hash combined with the compiler fingerprint
  // What a compiling provider compiles (here, or in the compile service): built
  // by the asker once the memory level has missed, never for a memory hit;
  // nullptr for a request of stored executables only. Shared, immutable: a
  // background compile keeps it after the asker has moved on.
  std::shared_ptr<const proto::CompileRequest> compile;
  compiler::CompileOptions options;
  const compiler::Target* target = nullptr;                 // what a compiling provider compiles for
  const proto::CompilerFingerprint* fingerprint = nullptr;  // what NEFFs must carry
  // Tiered compilation (tiered_chain.h): the graph's hash and the tier-0
  // fingerprint its stand-in is keyed by; nullptr: the request is not tiered.
  ir::hash_t graph_hash = 0;
  const compiler::KeyedFingerprint* stand_in_fingerprint = nullptr;
  // Ask only the levels that hold executables already (memory, disk, Redis):
  // providers that would compile answer NOT_FOUND, the disk takes no key lock,
  // and the request joins no other thread's flight for the key.
  bool stored_only = false;
  // Compiled off the user's thread (a tier-1 compile of tiered compilation):
  // observers that describe the user's code (the recompile report) skip it.
  bool background = false;
  // A tier-0 program that runs while the graph's tier-1 program compiles: made
  // here and kept in memory only (it costs milliseconds to compile; the disk,
  // Redis and the compile service keep tier-1 programs).
  bool stand_in = false;

  // The key's file-name form (made on demand: a memory hit never needs it).
  std::string KeyHex() const { return ir::HashToHex(key); }
};

// What a provider answers with.
struct ProvidedExecutable {
  std::shared_ptr<const runtime::Program> program;
  std::string neff;        // the serialized executable, when the provider has it
  size_t bytes = 0;        // its size, for the memory bound (0: unknown)
  bool persistent = true;  // false: keep it out of levels that outlive the process
};

// Resources a provider keeps for the rest of one request (a cross-process key
// lock held from a disk miss until the write-back); released when the chain
// has answered.
using RequestHolds = std::vector<std::shared_ptr<void>>;

class ExecutableProvider {
 public:
  virtual ~ExecutableProvider() = default;
  virtual const char* name() const = 0;
  virtual absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest& request, RequestHolds& holds) = 0;
  // An answer without waiting, locking for long or side effects beyond
  // counters, or nullptr: the chain asks its first provider this before it
  // joins a key's flight, so a memory hit costs one lookup.
  virtual std::shared_ptr<const runtime::Program> Lookup(const ExecutableRequest& request) {
    (void)request;
    return nullptr;
  }
  // Keeps what a provider below this one found. A failure is reported, not fatal:
  // the executable was found and runs either way.
  virtual absl::Status Keep(const ExecutableRequest& request, const ProvidedExecutable& found) {
    (void)request;
    (void)found;
    return absl::OkStatus();
  }
};

class ProviderChain {
 public:
  struct Answer {
    std::shared_ptr<const runtime::Program> program;
    std::string_view source;                // the name of the provider that answered (a static string)
    bool waited = false;                    // another thread's request for the key answered this one
    std::vector<absl::Status> keep_errors;  // write-backs that failed
  };

  explicit ProviderChain(std::vector<std::unique_ptr<ExecutableProvider>> providers);

  absl::StatusOr<Answer> Get(const ExecutableRequest& request);

  // The first provider's answer without waiting (ExecutableProvider::Lookup):
  // a memory hit, or nullptr. Needs only the request's key.
  std::shared_ptr<const runtime::Program> Lookup(const ExecutableRequest& request) {
    return providers_.empty() ? nullptr : providers_[0]->Lookup(request);
  }

  // Threads waiting for another thread's request for `key` (tests, diagnostics).
  int Waiting(ir::hash_t key);

  ExecutableProvider* provider(size_t i) const { return providers_[i].get(); }
  size_t size() const { return providers_.size(); }

 private:
  struct Flight {
    absl::Notification done;
    int waiting = 0;  // guarded by the chain's mu_
    absl::StatusOr<Answer> answer = absl::UnknownError("in flight");
  };
  absl::StatusOr<Answer> Search(const ExecutableRequest& request);

  std::vector<std::unique_ptr<ExecutableProvider>> providers_;
  absl::Mutex mu_;
  absl::flat_hash_map<ir::hash_t, std::shared_ptr<Flight>> flights_ ABSL_GUARDED_BY(mu_);
};

// L1: loaded programs by key, bounded by count and by NEFF bytes.
class MemoryProvider : public ExecutableProvider {
 public:
  MemoryProvider(size_t max_entries, size_t max_bytes) : lru_(max_entries, max_bytes) {}
  const char* name() const override { return "memory"; }
  std::shared_ptr<const runtime::Program> Lookup(const ExecutableRequest& request) override;
  absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest& request, RequestHolds& holds) override;
  absl::Status Keep(const ExecutableRequest& request, const ProvidedExecutable& found) override;
  void Clear() { lru_.Clear(); }

 private:
  LruCache<ir::hash_t, runtime::Program> lru_;
};

// L2: NEFF files in a DiskCache, validated by the NEFF reader on load. With
// `lock_until_kept`, a miss takes the key's cross-process lock and keeps it until
// the write-back, so of several processes missing one key only one compiles it;
// without it (a provider below can coordinate processes itself, as the compile
// service does) the lock is taken only around the re-check and the write.
class DiskProvider : public ExecutableProvider {
 public:
  DiskProvider(DiskCache* disk, bool lock_until_kept, double lock_timeout_s = 600.0)
      : disk_(disk), lock_until_kept_(lock_until_kept), lock_timeout_s_(lock_timeout_s) {}
  const char* name() const override { return "disk"; }
  absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest& request, RequestHolds& holds) override;
  absl::Status Keep(const ExecutableRequest& request, const ProvidedExecutable& found) override;

 private:
  absl::StatusOr<ProvidedExecutable> Load(const ExecutableRequest& request);

  DiskCache* disk_;
  bool lock_until_kept_;
  double lock_timeout_s_;
};

}  // namespace torch_neuron::cache

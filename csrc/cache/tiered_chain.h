// Tiered compilation (TORCH_NEURON_TIERED_COMPILE, at opt level 1), a
// decorator of the provider chain that holds its pool of background compiles.
// A tiered request (ExecutableRequest::stand_in_fingerprint set) gets the
// tier-1 program from memory or a persistent level (disk, Redis) if one holds
// it; else a tier-0 stand-in (milliseconds to compile, kept in memory only)
// while tier 1 compiles in the background from the graph's CompileRequest
// (which owns what it needs), once per key; later requests take tier 1 as soon
// as it is in memory. A background compile that fails leaves the stand-in in
// use for good, counted (compile.tiered.background_failed.count). Both tiers
// compute the same values within the tier-1 tolerance. A request that is not
// tiered goes to the chain as it is.
//
// Thread-safe (the tier table is locked; the chain is).
#pragma once

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/compile_pool.h"
#include "cache/executable_provider.h"

namespace torch_neuron::cache {

class TieredChain {
 public:
  // Adds the CompileRequest of a request's graph (ExecutableRequest::compile):
  // called on a miss in memory only, for a request that has none (a stand-in
  // shares its tier-1 request's). An error (a graph with no serialized form)
  // is the request's.
  using WriteCompileRequest = absl::FunctionRef<absl::Status(ExecutableRequest&)>;

  // `chain` outlives this object, which lives for the rest of the process
  // once it has queued a compile (its pool's workers do).
  explicit TieredChain(ProviderChain* chain);
  TieredChain(const TieredChain&) = delete;
  TieredChain& operator=(const TieredChain&) = delete;

  // The program of `request` from memory: its own, or, while its tier 1
  // compiles or after that failed, its stand-in's; else nullptr. No disk
  // read, no compile, no waiting.
  std::shared_ptr<const runtime::Program> Lookup(const ExecutableRequest& request);

  // The program of `request`: a memory hit as is; on a miss, what the chain
  // provides once `write` has added the CompileRequest (for a tiered request,
  // as above).
  absl::StatusOr<ProviderChain::Answer> Get(ExecutableRequest request, WriteCompileRequest write);

  // Waits for the tier-1 compiles queued so far (tests, config overrides).
  void WaitIdle() { pool_.WaitIdle(); }
  // Drops the tier-1 compiles no worker has started (at exit).
  void DropQueued() { pool_.DropQueued(); }

 private:
  enum class TierState {
    kUnknown,    // never asked: look in the persistent levels, then queue tier 1
    kCompiling,  // tier 1 is queued or compiling: run the stand-in
    kFailed,     // tier 1 failed in the background: the stand-in runs for good
  };

  TierState State(ir::hash_t key);
  // Sets kCompiling unless the key has a state; true when this call set it.
  bool Claim(ir::hash_t key);
  void Set(ir::hash_t key, TierState state);
  // A compiled tier 1 is found by later lookups (memory, then disk).
  void Done(ir::hash_t key);

  // The memory level's answer for `request`, if it holds the program.
  std::optional<ProviderChain::Answer> FromMemory(const ExecutableRequest& request);
  // The chain's answer for `request`: a memory hit, else the chain asked once
  // `write` has added the CompileRequest.
  absl::StatusOr<ProviderChain::Answer> Provide(ExecutableRequest& request, WriteCompileRequest write);
  // Queues the tier-1 compile of `request` (its CompileRequest owns what the
  // compile needs: the sync that asked releases its IR before the compile ends).
  void QueueTier1(ExecutableRequest request);

  ProviderChain* const chain_;
  absl::Mutex mu_;
  absl::flat_hash_map<ir::hash_t, TierState> states_ ABSL_GUARDED_BY(mu_);
  CompilePool pool_{"tier-1 compile"};
};

// The memory-only request of the tier-0 stand-in of tiered request `tier1`,
// sharing its CompileRequest when it has one.
ExecutableRequest StandInRequest(const ExecutableRequest& tier1);

}  // namespace torch_neuron::cache

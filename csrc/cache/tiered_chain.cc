#include "cache/tiered_chain.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "base/profiler.h"

namespace torch_neuron::cache {
namespace {

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

}  // namespace

ExecutableRequest StandInRequest(const ExecutableRequest& tier1) {
  ExecutableRequest request;
  request.options = tier1.options;
  request.options.opt_level = 0;
  request.target = tier1.target;
  request.key = compiler::CacheKey(tier1.graph_hash, tier1.stand_in_fingerprint->hash);
  request.fingerprint = &tier1.stand_in_fingerprint->fingerprint;
  request.graph_hash = tier1.graph_hash;
  request.compile = tier1.compile;
  request.stand_in = true;
  return request;
}

TieredChain::TieredChain(ProviderChain* chain) : chain_(chain) {}

TieredChain::TierState TieredChain::State(ir::hash_t key) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(key);
  return it == states_.end() ? TierState::kUnknown : it->second;
}

bool TieredChain::Claim(ir::hash_t key) {
  absl::MutexLock lock(&mu_);
  return states_.try_emplace(key, TierState::kCompiling).second;
}

void TieredChain::Set(ir::hash_t key, TierState state) {
  absl::MutexLock lock(&mu_);
  states_[key] = state;
}

void TieredChain::Done(ir::hash_t key) {
  absl::MutexLock lock(&mu_);
  states_.erase(key);
}

std::shared_ptr<const runtime::Program> TieredChain::Lookup(const ExecutableRequest& request) {
  if (std::shared_ptr<const runtime::Program> program = chain_->Lookup(request)) return program;
  if (request.stand_in_fingerprint == nullptr) return nullptr;
  const TierState state = State(request.key);
  if (state != TierState::kCompiling && state != TierState::kFailed) return nullptr;
  std::shared_ptr<const runtime::Program> stand_in = chain_->Lookup(StandInRequest(request));
  if (stand_in != nullptr) TierCounters().stand_ins->Add(1);
  return stand_in;
}

std::optional<ProviderChain::Answer> TieredChain::FromMemory(const ExecutableRequest& request) {
  std::shared_ptr<const runtime::Program> program = chain_->Lookup(request);
  if (program == nullptr) return std::nullopt;
  ProviderChain::Answer answer;
  answer.program = std::move(program);
  answer.source = chain_->provider(0)->name();
  return answer;
}

absl::StatusOr<ProviderChain::Answer> TieredChain::Provide(ExecutableRequest& request,
                                                           WriteCompileRequest write) {
  if (std::optional<ProviderChain::Answer> hit = FromMemory(request)) return *std::move(hit);
  if (request.compile == nullptr) {
    if (absl::Status made = write(request); !made.ok()) return made;
  }
  return chain_->Get(request);
}

absl::StatusOr<ProviderChain::Answer> TieredChain::Get(ExecutableRequest request, WriteCompileRequest write) {
  if (request.stand_in_fingerprint == nullptr) return Provide(request, write);
  if (std::optional<ProviderChain::Answer> hit = FromMemory(request)) return *std::move(hit);
  if (State(request.key) == TierState::kUnknown) {
    request.stored_only = true;
    absl::StatusOr<ProviderChain::Answer> stored = chain_->Get(request);
    if (stored.ok()) return stored;
    request.stored_only = false;
    if (Claim(request.key)) {
      if (absl::Status made = write(request); !made.ok()) {
        Done(request.key);
        return made;
      }
      QueueTier1(request);
    }
  }
  // kCompiling, kFailed, or kUnknown again (tier 1 finished meanwhile: the
  // stand-in is already cheaper to get than a disk read).
  TierCounters().stand_ins->Add(1);
  ExecutableRequest stand_in = StandInRequest(request);
  return Provide(stand_in, write);
}

void TieredChain::QueueTier1(ExecutableRequest request) {
  TierCounters().queued->Add(1);
  request.background = true;
  pool_.Submit([this, request = std::move(request)] {
    profiler::Scope scope("compile", [&] {
      return absl::StrCat("tier 1 of graph ", request.KeyHex().substr(0, 16), " (",
                          request.compile->nodes_size(), " nodes)");
    });
    const auto start = std::chrono::steady_clock::now();
    bool ok = false;
    try {
      ok = chain_->Get(request).ok();
    } catch (...) {
      ok = false;  // the stand-in keeps running; counted below
    }
    TierCounters().background_ns->Add(metrics::NanosSince(start));
    if (ok) {
      Done(request.key);
    } else {
      TierCounters().failed->Add(1);
      Set(request.key, TierState::kFailed);
    }
  });
}

}  // namespace torch_neuron::cache

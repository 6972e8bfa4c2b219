#include "cache/executable_provider.h"

#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "cache/disk_cache.h"
#include "neff/neff_reader.h"
#include "runtime/native_library.h"

namespace torch_neuron::cache {
namespace {

struct ProviderMetrics {
  metrics::Counter* graph_hits = metrics::GetCounter("graph.cache_hit.count");
  metrics::Counter* memory_hits = metrics::GetCounter("cache.memory_hit.count");
  metrics::Counter* disk_hits = metrics::GetCounter("cache.disk_hit.count");
  metrics::Counter* load_ns = metrics::GetCounter("cache.load.ns");
  metrics::Counter* store_errors = metrics::GetCounter("cache.store_error.count");
  metrics::Counter* coalesced = metrics::GetCounter("cache.coalesced.count");
};

const ProviderMetrics& ProviderCounters() {
  static const ProviderMetrics* counters = new ProviderMetrics();
  return *counters;
}

}  // namespace

ProviderChain::ProviderChain(std::vector<std::unique_ptr<ExecutableProvider>> providers)
    : providers_(std::move(providers)) {}

absl::StatusOr<ProviderChain::Answer> ProviderChain::Get(const ExecutableRequest& request) {
  if (!providers_.empty()) {
    if (std::shared_ptr<const runtime::Program> program = providers_[0]->Lookup(request)) {
      Answer answer;
      answer.program = std::move(program);
      answer.source = providers_[0]->name();
      return answer;
    }
  }
  if (request.stored_only) return Search(request);
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Flight>& slot = flights_[request.key];
    if (slot == nullptr) {
      slot = std::make_shared<Flight>();
      leader = true;
    }
    flight = slot;
    if (!leader) ++flight->waiting;
  }
  if (!leader) {
    flight->done.WaitForNotification();
    ProviderCounters().coalesced->Add(1);
    absl::StatusOr<Answer> answer = flight->answer;
    if (answer.ok()) answer->waited = true;
    return answer;
  }
  // Whatever happens, the waiters are woken with an answer: a provider that
  // throws (a compiler bug) becomes this key's error instead of a hang.
  try {
    flight->answer = Search(request);
  } catch (const std::exception& e) {
    flight->answer =
        absl::InternalError(absl::StrCat("while providing graph ", request.KeyHex(), ": ", e.what()));
  } catch (...) {
    flight->answer = absl::InternalError(
        absl::StrCat("while providing graph ", request.KeyHex(), ": an unknown exception"));
  }
  {
    absl::MutexLock lock(&mu_);
    flights_.erase(request.key);
  }
  flight->done.Notify();
  return flight->answer;
}

int ProviderChain::Waiting(ir::hash_t key) {
  absl::MutexLock lock(&mu_);
  auto it = flights_.find(key);
  return it == flights_.end() ? 0 : it->second->waiting;
}

absl::StatusOr<ProviderChain::Answer> ProviderChain::Search(const ExecutableRequest& request) {
  RequestHolds holds;  // released on return, after the write-backs
  for (size_t i = 0; i < providers_.size(); ++i) {
    absl::StatusOr<ProvidedExecutable> found = providers_[i]->Get(request, holds);
    if (!found.ok()) {
      if (absl::IsNotFound(found.status()) || absl::IsUnavailable(found.status())) continue;
      return found.status();
    }
    if (found->program == nullptr) {
      return absl::InternalError(
          absl::StrCat("executable provider '", providers_[i]->name(), "' answered without a program"));
    }
    Answer answer;
    answer.program = found->program;
    answer.source = providers_[i]->name();
    // Lowest level first: the disk copy exists before the memory entry that
    // makes later requests skip the disk.
    for (size_t j = i; j-- > 0;) {
      absl::Status kept = providers_[j]->Keep(request, *found);
      if (!kept.ok()) answer.keep_errors.push_back(std::move(kept));
    }
    return answer;
  }
  return absl::NotFoundError(absl::StrCat("no executable provider could provide graph ", request.KeyHex()));
}

std::shared_ptr<const runtime::Program> MemoryProvider::Lookup(const ExecutableRequest& request) {
  std::shared_ptr<const runtime::Program> program = lru_.Get(request.key);
  if (program != nullptr) {
    ProviderCounters().graph_hits->Add(1);
    ProviderCounters().memory_hits->Add(1);
  }
  return program;
}

absl::StatusOr<ProvidedExecutable> MemoryProvider::Get(const ExecutableRequest& request,
                                                       RequestHolds& holds) {
  (void)holds;
  std::shared_ptr<const runtime::Program> program = Lookup(request);
  if (program == nullptr) return absl::NotFoundError("not in memory");
  ProvidedExecutable found;
  found.program = std::move(program);
  return found;
}

absl::Status MemoryProvider::Keep(const ExecutableRequest& request, const ProvidedExecutable& found) {
  lru_.Put(request.key, found.program, found.bytes);
  return absl::OkStatus();
}

absl::StatusOr<ProvidedExecutable> DiskProvider::Load(const ExecutableRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  ProvidedExecutable found;
  std::optional<std::string> bytes =
      disk_->Load(request.KeyHex(), [&](std::string_view data) -> absl::Status {
        absl::StatusOr<neff::LoadedNeff> loaded = neff::ReadNeff(data, request.fingerprint);
        if (!loaded.ok()) return loaded.status();
        found.program = loaded->program;
        return absl::OkStatus();
      });
  if (!bytes.has_value() || found.program == nullptr) return absl::NotFoundError("not on disk");
  runtime::LoadNativeObjects(found.program->native_objects);
  found.bytes = bytes->size();
  found.neff = *std::move(bytes);
  ProviderCounters().disk_hits->Add(1);
  ProviderCounters().load_ns->Add(metrics::NanosSince(start));
  return found;
}

absl::StatusOr<ProvidedExecutable> DiskProvider::Get(const ExecutableRequest& request, RequestHolds& holds) {
  if (request.stand_in) return absl::NotFoundError("stand-ins are not kept on disk");
  absl::StatusOr<ProvidedExecutable> found = Load(request);
  if (found.ok() || !lock_until_kept_ || request.stored_only) return found;
  // Miss: wait for any other process compiling this key, then look again. The
  // lock stays held (in `holds`) until the compiled NEFF is kept.
  absl::StatusOr<std::unique_ptr<DiskCache::KeyLock>> locked =
      disk_->LockKey(request.KeyHex(), lock_timeout_s_);
  if (!locked.ok()) return absl::NotFoundError("not on disk (key lock unavailable)");
  holds.push_back(std::shared_ptr<DiskCache::KeyLock>(std::move(*locked)));
  return Load(request);
}

absl::Status DiskProvider::Keep(const ExecutableRequest& request, const ProvidedExecutable& found) {
  if (disk_->read_only() || !found.persistent || found.neff.empty() || request.stand_in) {
    return absl::OkStatus();
  }
  std::unique_ptr<DiskCache::KeyLock> lock;
  if (!lock_until_kept_) {
    absl::StatusOr<std::unique_ptr<DiskCache::KeyLock>> locked =
        disk_->LockKey(request.KeyHex(), lock_timeout_s_);
    if (locked.ok()) lock = *std::move(locked);
  }
  absl::Status stored = disk_->Store(request.KeyHex(), found.neff);
  if (!stored.ok()) {
    ProviderCounters().store_errors->Add(1);
    return absl::Status(stored.code(),
                        absl::StrCat("cannot write the compile cache (", stored.message(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace torch_neuron::cache

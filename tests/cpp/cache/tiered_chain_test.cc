#include "cache/tiered_chain.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/metrics.h"
#include "cache/chain_assembly.h"

namespace torch_neuron::cache {
namespace {

// The compiling end of a chain: a program per request, told apart by tier;
// answers stored-only requests NOT_FOUND, as compilers do, unless `stored`
// holds the key.
class FakeCompiler : public ExecutableProvider {
 public:
  const char* name() const override { return "compile"; }
  absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest& request, RequestHolds&) override {
    absl::MutexLock lock(&mu_);
    if (request.stored_only) {
      ++stored_asks;
      if (request.key != stored_key) return absl::NotFoundError("compiles only");
    } else {
      if (request.compile == nullptr) return absl::NotFoundError("no graph");
      (request.stand_in ? stand_in_compiles : tier1_compiles)++;
      if (request.background) ++background_compiles;
      if (!request.stand_in && fail_tier1) return absl::InternalError("tier 1 failed");
    }
    ProvidedExecutable found;
    found.program = request.stand_in ? stand_in_program : tier1_program;
    found.persistent = !request.stand_in;
    return found;
  }

  absl::Mutex mu_;
  int stored_asks = 0, stand_in_compiles = 0, tier1_compiles = 0, background_compiles = 0;
  ir::hash_t stored_key = 0;
  bool fail_tier1 = false;
  std::shared_ptr<const runtime::Program> tier1_program = std::make_shared<runtime::Program>();
  std::shared_ptr<const runtime::Program> stand_in_program = std::make_shared<runtime::Program>();
};

struct Fixture {
  Fixture() {
    std::vector<std::unique_ptr<ExecutableProvider>> providers;
    auto memory_level = std::make_unique<MemoryProvider>(16, 1 << 20);
    memory = memory_level.get();
    providers.push_back(std::move(memory_level));
    auto compiler_level = std::make_unique<FakeCompiler>();
    compiler = compiler_level.get();
    providers.push_back(std::move(compiler_level));
    // Never deleted: the pool's workers live for the rest of the process, as
    // the process's TieredChain does.
    chain = new ProviderChain(std::move(providers));
    tiered = new TieredChain(chain);
    tier1.hash = 0x1111;
    tier0.hash = 0x2222;
  }

  ExecutableRequest Request(ir::hash_t graph_hash, bool tiered_request) {
    ExecutableRequest r;
    r.graph_hash = graph_hash;
    r.key = compiler::CacheKey(graph_hash, tier1.hash);
    r.fingerprint = &tier1.fingerprint;
    if (tiered_request) r.stand_in_fingerprint = &tier0;
    return r;
  }

  // What lazy/ does on a miss: adds the graph's request (an empty one here).
  absl::Status Write(ExecutableRequest& r) {
    ++writes;
    if (r.compile == nullptr) r.compile = std::make_shared<proto::CompileRequest>();
    return absl::OkStatus();
  }

  MemoryProvider* memory;
  FakeCompiler* compiler;
  ProviderChain* chain;
  TieredChain* tiered;
  compiler::KeyedFingerprint tier1, tier0;
  int writes = 0;
};

int64_t Count(const char* name) { return metrics::GetCounter(name)->Value(); }

TEST(TieredChainTest, AnUntieredRequestIsTheChainsAndWritesItsRequestOnlyOnAMiss) {
  Fixture f;
  auto write = [&f](ExecutableRequest& r) { return f.Write(r); };
  absl::StatusOr<ProviderChain::Answer> first = f.tiered->Get(f.Request(7, false), write);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->source, "compile");
  EXPECT_EQ(first->program, f.compiler->tier1_program);
  absl::StatusOr<ProviderChain::Answer> again = f.tiered->Get(f.Request(7, false), write);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->source, "memory");
  EXPECT_EQ(f.writes, 1);
  EXPECT_EQ(f.compiler->stored_asks, 0);
  EXPECT_EQ(f.compiler->tier1_compiles, 1);
  EXPECT_EQ(f.compiler->stand_in_compiles, 0);
}

TEST(TieredChainTest, AMissRunsTheStandInWhileTierOneCompilesThenTierOneIsTaken) {
  Fixture f;
  auto write = [&f](ExecutableRequest& r) { return f.Write(r); };
  const int64_t stand_ins = Count("compile.tiered.stand_in.count");
  const int64_t queued = Count("compile.tiered.background.count");
  absl::StatusOr<ProviderChain::Answer> first = f.tiered->Get(f.Request(9, true), write);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->program, f.compiler->stand_in_program);
  EXPECT_EQ(first->source, "compile");
  EXPECT_EQ(f.writes, 1);  // one request, shared by the stand-in and tier 1
  EXPECT_EQ(f.compiler->stored_asks, 1);
  EXPECT_EQ(Count("compile.tiered.stand_in.count") - stand_ins, 1);
  EXPECT_EQ(Count("compile.tiered.background.count") - queued, 1);
  f.tiered->WaitIdle();
  EXPECT_EQ(f.compiler->tier1_compiles, 1);
  EXPECT_EQ(f.compiler->background_compiles, 1);
  // Tier 1 is in memory now: the lookup and the next request take it.
  EXPECT_EQ(f.tiered->Lookup(f.Request(9, true)), f.compiler->tier1_program);
  absl::StatusOr<ProviderChain::Answer> later = f.tiered->Get(f.Request(9, true), write);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->program, f.compiler->tier1_program);
  EXPECT_EQ(later->source, "memory");
  EXPECT_EQ(f.compiler->stand_in_compiles, 1);
  EXPECT_EQ(f.writes, 1);
}

TEST(TieredChainTest, AFailedTierOneLeavesTheStandInInUseForGood) {
  Fixture f;
  f.compiler->fail_tier1 = true;
  auto write = [&f](ExecutableRequest& r) { return f.Write(r); };
  const int64_t failed = Count("compile.tiered.background_failed.count");
  ASSERT_TRUE(f.tiered->Get(f.Request(11, true), write).ok());
  f.tiered->WaitIdle();
  EXPECT_EQ(Count("compile.tiered.background_failed.count") - failed, 1);
  const int64_t stand_ins = Count("compile.tiered.stand_in.count");
  EXPECT_EQ(f.tiered->Lookup(f.Request(11, true)), f.compiler->stand_in_program);
  absl::StatusOr<ProviderChain::Answer> again = f.tiered->Get(f.Request(11, true), write);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->program, f.compiler->stand_in_program);
  EXPECT_EQ(Count("compile.tiered.stand_in.count") - stand_ins, 2);
  EXPECT_EQ(f.compiler->tier1_compiles, 1);  // never queued again
  EXPECT_EQ(f.compiler->stored_asks, 1);     // nor looked for again
  // Untiered, the lookup knows no stand-in.
  EXPECT_EQ(f.tiered->Lookup(f.Request(11, false)), nullptr);
}

TEST(TieredChainTest, AStoredTierOneIsTakenWithoutAStandInOrARequest) {
  Fixture f;
  auto write = [&f](ExecutableRequest& r) { return f.Write(r); };
  f.compiler->stored_key = f.Request(13, true).key;
  absl::StatusOr<ProviderChain::Answer> answer = f.tiered->Get(f.Request(13, true), write);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->program, f.compiler->tier1_program);
  f.tiered->WaitIdle();
  EXPECT_EQ(f.writes, 0);
  EXPECT_EQ(f.compiler->tier1_compiles + f.compiler->stand_in_compiles, 0);
}

TEST(TieredChainTest, AGraphWithoutARequestFormIsTheRequestsErrorAndIsNotQueued) {
  Fixture f;
  auto refuse = [](ExecutableRequest&) { return absl::UnimplementedError("no serialized form"); };
  absl::StatusOr<ProviderChain::Answer> answer = f.tiered->Get(f.Request(15, true), refuse);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnimplemented);
  f.tiered->WaitIdle();
  EXPECT_EQ(f.compiler->tier1_compiles + f.compiler->stand_in_compiles, 0);
  EXPECT_EQ(f.tiered->Lookup(f.Request(15, true)), nullptr);
}

std::vector<std::string> Names(const ProviderChain& chain) {
  std::vector<std::string> names;
  for (size_t i = 0; i < chain.size(); ++i) names.push_back(chain.provider(i)->name());
  return names;
}

class FakeServiceLevel : public ExecutableProvider {
 public:
  const char* name() const override { return "service"; }
  absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest&, RequestHolds&) override {
    return absl::UnavailableError("no service");
  }
};

TEST(ChainAssemblyTest, TheCacheSubConfigNamesTheLevels) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tn_chain_assembly_" + std::to_string(::getpid()))).string();
  int service_levels = 0;
  bool remote_given = false;
  ServiceLevel service =
      [&](std::unique_ptr<ExecutableProvider> remote) -> std::unique_ptr<ExecutableProvider> {
    ++service_levels;
    remote_given = remote != nullptr;
    return std::make_unique<FakeServiceLevel>();
  };
  CacheConfig config;
  config.dir = dir;
  config.enabled = false;
  EXPECT_EQ(Names(*AssembleChain(config, service, {})->chain),
            (std::vector<std::string>{"memory", "compile"}));
  config.enabled = true;
  std::unique_ptr<AssembledChain> disk = AssembleChain(config, service, {});
  EXPECT_EQ(Names(*disk->chain), (std::vector<std::string>{"memory", "disk", "compile"}));
  EXPECT_NE(disk->disk, nullptr);
  EXPECT_EQ(disk->memory, disk->chain->provider(0));
  config.remote_cache = "redis://127.0.0.1:1/0";
  EXPECT_EQ(Names(*AssembleChain(config, service, {})->chain),
            (std::vector<std::string>{"memory", "disk", "remote", "compile"}));
  EXPECT_EQ(service_levels, 0);
  // The service stands in front of the remote level, which it owns.
  config.compile_service = "auto";
  EXPECT_EQ(Names(*AssembleChain(config, service, {})->chain),
            (std::vector<std::string>{"memory", "disk", "service", "compile"}));
  EXPECT_EQ(service_levels, 1);
  EXPECT_TRUE(remote_given);
  config.remote_cache.clear();
  AssembleChain(config, service, {});
  EXPECT_FALSE(remote_given);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace torch_neuron::cache

#include "cache/executable_provider.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "base/metrics.h"
#include "cache/compile_provider.h"
#include "cache/disk_cache.h"
#include "compiler/compile_request.h"
#include "compiler/fingerprint.h"
#include "compiler/host/host_target.h"
#include "ir/graph.h"

namespace torch_neuron::cache {
namespace {
namespace fs = std::filesystem;

// A provider that answers as told and counts what it is asked.
class FakeProvider : public ExecutableProvider {
 public:
  FakeProvider(const char* name, absl::Status status) : name_(name), status_(std::move(status)) {}
  const char* name() const override { return name_; }
  absl::StatusOr<ProvidedExecutable> Get(const ExecutableRequest& request, RequestHolds&) override {
    if (compiles && request.stored_only) return absl::NotFoundError("compiles only");
    ++gets;
    if (entered != nullptr && !entered->HasBeenNotified()) entered->Notify();
    if (release != nullptr) release->WaitForNotification();
    if (throw_on_get) throw std::runtime_error("provider bug");
    if (!status_.ok()) return status_;
    ProvidedExecutable found;
    found.program = program;
    found.neff = "neff bytes";
    return found;
  }
  absl::Status Keep(const ExecutableRequest&, const ProvidedExecutable& found) override {
    kept_order.push_back(name_);
    kept_program = found.program;
    return keep_status;
  }

  const char* name_;
  absl::Status status_;
  std::shared_ptr<const runtime::Program> program = std::make_shared<runtime::Program>();
  std::atomic<int> gets{0};
  std::shared_ptr<const runtime::Program> kept_program;
  absl::Status keep_status;
  absl::Notification* entered = nullptr;
  absl::Notification* release = nullptr;
  bool throw_on_get = false;
  bool compiles = false;  // answers stored_only requests with NOT_FOUND, as compilers do
  static inline std::vector<std::string> kept_order;
};

ExecutableRequest Request(ir::hash_t key) {
  ExecutableRequest r;
  r.key = key;
  return r;
}

struct Chain {
  std::vector<FakeProvider*> fakes;
  std::unique_ptr<ProviderChain> chain;
};

Chain MakeChain(std::vector<std::unique_ptr<FakeProvider>> providers) {
  Chain c;
  std::vector<std::unique_ptr<ExecutableProvider>> owned;
  for (auto& p : providers) {
    c.fakes.push_back(p.get());
    owned.push_back(std::move(p));
  }
  c.chain = std::make_unique<ProviderChain>(std::move(owned));
  return c;
}

// Two threads ask for `key`: the second asks while the first is inside the
// chain's only provider (held there until the second is waiting).
std::pair<absl::StatusOr<ProviderChain::Answer>, absl::StatusOr<ProviderChain::Answer>> RaceForOneKey(
    Chain& c, ir::hash_t key) {
  absl::Notification entered, release;
  c.fakes[0]->entered = &entered;
  c.fakes[0]->release = &release;
  absl::StatusOr<ProviderChain::Answer> first, second;
  std::thread a([&] { first = c.chain->Get(Request(key)); });
  entered.WaitForNotification();
  std::thread b([&] { second = c.chain->Get(Request(key)); });
  while (c.chain->Waiting(key) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  release.Notify();
  a.join();
  b.join();
  c.fakes[0]->entered = nullptr;
  c.fakes[0]->release = nullptr;
  return {std::move(first), std::move(second)};
}

TEST(ProviderChainTest, NotFoundAndUnavailablePassOnAndTheAnswerIsKeptAboveLowestFirst) {
  FakeProvider::kept_order.clear();
  std::vector<std::unique_ptr<FakeProvider>> p;
  p.push_back(std::make_unique<FakeProvider>("memory", absl::NotFoundError("miss")));
  p.push_back(std::make_unique<FakeProvider>("service", absl::UnavailableError("down")));
  p.push_back(std::make_unique<FakeProvider>("compile", absl::OkStatus()));
  p.push_back(std::make_unique<FakeProvider>("never", absl::OkStatus()));
  Chain c = MakeChain(std::move(p));
  absl::StatusOr<ProviderChain::Answer> answer = c.chain->Get(Request(7));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->source, "compile");
  EXPECT_EQ(answer->program, c.fakes[2]->program);
  EXPECT_FALSE(answer->waited);
  EXPECT_EQ(c.fakes[3]->gets, 0);
  EXPECT_EQ(FakeProvider::kept_order, (std::vector<std::string>{"service", "memory"}));
  EXPECT_EQ(c.fakes[0]->kept_program, c.fakes[2]->program);
}

TEST(ProviderChainTest, AnyOtherErrorStopsTheSearch) {
  std::vector<std::unique_ptr<FakeProvider>> p;
  p.push_back(std::make_unique<FakeProvider>("memory", absl::NotFoundError("miss")));
  p.push_back(std::make_unique<FakeProvider>("compile", absl::InvalidArgumentError("bad graph")));
  p.push_back(std::make_unique<FakeProvider>("after", absl::OkStatus()));
  Chain c = MakeChain(std::move(p));
  absl::StatusOr<ProviderChain::Answer> answer = c.chain->Get(Request(8));
  EXPECT_TRUE(absl::IsInvalidArgument(answer.status())) << answer.status();
  EXPECT_EQ(answer.status().message(), "bad graph");
  EXPECT_EQ(c.fakes[2]->gets, 0);
}

TEST(ProviderChainTest, NobodyAnsweringIsNotFoundNamingTheGraph) {
  std::vector<std::unique_ptr<FakeProvider>> p;
  p.push_back(std::make_unique<FakeProvider>("memory", absl::NotFoundError("miss")));
  Chain c = MakeChain(std::move(p));
  absl::StatusOr<ProviderChain::Answer> answer = c.chain->Get(Request(9));
  EXPECT_TRUE(absl::IsNotFound(answer.status()));
  EXPECT_NE(answer.status().message().find(ir::HashToHex(9)), std::string::npos) << answer.status();
}

TEST(ProviderChainTest, AFailedWriteBackIsReportedAndTheAnswerStands) {
  std::vector<std::unique_ptr<FakeProvider>> p;
  p.push_back(std::make_unique<FakeProvider>("disk", absl::NotFoundError("miss")));
  p.push_back(std::make_unique<FakeProvider>("compile", absl::OkStatus()));
  Chain c = MakeChain(std::move(p));
  c.fakes[0]->keep_status = absl::PermissionDeniedError("read-only file system");
  absl::StatusOr<ProviderChain::Answer> answer = c.chain->Get(Request(10));
  ASSERT_TRUE(answer.ok());
  ASSERT_EQ(answer->keep_errors.size(), 1u);
  EXPECT_TRUE(absl::IsPermissionDenied(answer->keep_errors[0]));
}

// Two threads ask for one key that is not cached: the provider below is asked
// once, and the second thread gets the first one's executable.
TEST(ProviderChainTest, TwoThreadsAskingForOneKeyCompileItOnce) {
  metrics::Reset();
  std::vector<std::unique_ptr<FakeProvider>> p;
  p.push_back(std::make_unique<FakeProvider>("compile", absl::OkStatus()));
  Chain c = MakeChain(std::move(p));
  auto [first, second] = RaceForOneKey(c, 11);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(c.fakes[0]->gets, 1);
  EXPECT_EQ(first->program, second->program);
  EXPECT_FALSE(first->waited);
  EXPECT_TRUE(second->waited);
  EXPECT_EQ(metrics::GetCounter("cache.coalesced.count")->Value(), 1);
  EXPECT_EQ(c.chain->Waiting(11), 0);
}

TEST(ProviderChainTest, AThrowingProviderFailsTheKeyForEveryWaiterWithoutHanging) {
  std::vector<std::unique_ptr<FakeProvider>> p;
  p.push_back(std::make_unique<FakeProvider>("compile", absl::OkStatus()));
  Chain c = MakeChain(std::move(p));
  c.fakes[0]->throw_on_get = true;
  auto [first, second] = RaceForOneKey(c, 12);
  EXPECT_TRUE(absl::IsInternal(first.status()));
  EXPECT_NE(first.status().message().find("provider bug"), std::string::npos);
  EXPECT_EQ(second.status(), first.status());
  // The failure is not remembered: the next request asks again.
  c.fakes[0]->throw_on_get = false;
  EXPECT_TRUE(c.chain->Get(Request(12)).ok());
}

// A stored-only request (tiered compilation's look for a tier-1 program) does
// not wait for another thread's compile of the key: it is answered by the
// levels that store executables, at once.
TEST(ProviderChainTest, AStoredOnlyRequestJoinsNoFlight) {
  std::vector<std::unique_ptr<FakeProvider>> p;
  p.push_back(std::make_unique<FakeProvider>("compile", absl::OkStatus()));
  Chain c = MakeChain(std::move(p));
  c.fakes[0]->compiles = true;
  absl::Notification entered, release;
  c.fakes[0]->entered = &entered;
  c.fakes[0]->release = &release;
  absl::StatusOr<ProviderChain::Answer> compiled;
  std::thread a([&] { compiled = c.chain->Get(Request(13)); });
  entered.WaitForNotification();  // the key is in flight, its compile held
  ExecutableRequest stored = Request(13);
  stored.stored_only = true;
  absl::StatusOr<ProviderChain::Answer> answer = c.chain->Get(stored);
  EXPECT_TRUE(absl::IsNotFound(answer.status())) << answer.status();
  EXPECT_EQ(c.chain->Waiting(13), 0);
  release.Notify();
  a.join();
  EXPECT_TRUE(compiled.ok());
  EXPECT_EQ(c.fakes[0]->gets, 1);
}

// The real providers: memory, disk and the compiler here, on a real graph.
class RealChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tn_provider_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    metrics::Reset();
    disk_ = std::make_unique<DiskCache>(dir_.string(), int64_t{64} << 20, false);
    const ir::Shape f32(c10::ScalarType::Float, {4});
    ir::Value a{ir::Node::MakeDeviceData(f32, nullptr), 0};
    ir::Value b{ir::Node::MakeDeviceData(f32, nullptr), 0};
    roots_ = {ir::Value{
        ir::Node::MakeOp("aten::mul.Tensor", {a, b}, {ir::Arg::Operand(0), ir::Arg::Operand(1)}, {f32}), 0}};
    graph_ = ir::Canonicalize(roots_);  // points into roots_' nodes, kept alive below
    request_.key = graph_.hash;
    request_.options.opt_level = 0;
    absl::StatusOr<proto::CompileRequest> compile = compiler::MakeCompileRequest(graph_, request_.options);
    ASSERT_TRUE(compile.ok()) << compile.status();
    request_.compile = std::make_shared<const proto::CompileRequest>(*std::move(compile));
    request_.target = &target_;
    request_.fingerprint = &compiler::FingerprintFor(0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ProviderChain> Make(LocalCompileProvider** compile_out = nullptr) {
    std::vector<std::unique_ptr<ExecutableProvider>> p;
    p.push_back(std::make_unique<MemoryProvider>(16, size_t{1} << 20));
    p.push_back(std::make_unique<DiskProvider>(disk_.get(), /*lock_until_kept=*/true, 5.0));
    auto compile = std::make_unique<LocalCompileProvider>();
    if (compile_out != nullptr) *compile_out = compile.get();
    p.push_back(std::move(compile));
    return std::make_unique<ProviderChain>(std::move(p));
  }
  int64_t Compiles() { return metrics::GetCounter("graph.compile.count")->Value(); }

  fs::path dir_;
  std::unique_ptr<DiskCache> disk_;
  std::vector<ir::Value> roots_;
  ir::CanonicalGraph graph_;
  compiler::HostTarget target_;
  ExecutableRequest request_;
};

TEST_F(RealChainTest, CompilesOnceThenAnswersFromMemoryThenFromDiskInANewProcessChain) {
  LocalCompileProvider* compile = nullptr;
  auto chain = Make(&compile);
  int events = 0;
  compile->AddObserver([&](const CompileEvent& e) {
    ++events;
    EXPECT_EQ(e.request.key, request_.key);
    EXPECT_GT(e.compile_ns, 0);
  });
  absl::StatusOr<ProviderChain::Answer> first = chain->Get(request_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->source, "compile");
  EXPECT_EQ(events, 1);
  EXPECT_EQ(Compiles(), 1);
  EXPECT_TRUE(fs::exists(disk_->EntryPath(request_.KeyHex())));
  absl::StatusOr<ProviderChain::Answer> again = chain->Get(request_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->source, "memory");
  EXPECT_EQ(again->program, first->program);
  // A fresh chain (another process) over the same directory loads the NEFF.
  auto fresh = Make();
  absl::StatusOr<ProviderChain::Answer> loaded = fresh->Get(request_);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->source, "disk");
  EXPECT_EQ(Compiles(), 1);
  EXPECT_EQ(metrics::GetCounter("cache.disk_hit.count")->Value(), 1);
}

TEST_F(RealChainTest, ACorruptDiskEntryIsCompiledAgainNotLoaded) {
  ASSERT_TRUE(Make()->Get(request_).ok());
  { std::ofstream(disk_->EntryPath(request_.KeyHex()), std::ios::trunc) << "not a neff"; }
  absl::StatusOr<ProviderChain::Answer> answer = Make()->Get(request_);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->source, "compile");
  EXPECT_EQ(Compiles(), 2);
}

TEST_F(RealChainTest, StoredOnlyFindsTheDiskEntryAndNeverCompiles) {
  request_.stored_only = true;
  absl::StatusOr<ProviderChain::Answer> miss = Make()->Get(request_);
  EXPECT_TRUE(absl::IsNotFound(miss.status())) << miss.status();
  EXPECT_EQ(Compiles(), 0);
  request_.stored_only = false;
  ASSERT_TRUE(Make()->Get(request_).ok());
  request_.stored_only = true;
  absl::StatusOr<ProviderChain::Answer> hit = Make()->Get(request_);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->source, "disk");
  EXPECT_EQ(Compiles(), 1);
}

TEST_F(RealChainTest, AStandInIsCompiledAndKeptInMemoryOnly) {
  request_.stand_in = true;
  auto chain = Make();
  absl::StatusOr<ProviderChain::Answer> first = chain->Get(request_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->source, "compile");
  EXPECT_FALSE(fs::exists(disk_->EntryPath(request_.KeyHex())));
  absl::StatusOr<ProviderChain::Answer> again = chain->Get(request_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->source, "memory");
  EXPECT_EQ(Compiles(), 1);
}

TEST_F(RealChainTest, TwoThreadsOnOneUncompiledGraphCompileItOnce) {
  auto chain = Make();
  constexpr int kThreads = 4;
  std::vector<absl::StatusOr<ProviderChain::Answer>> answers(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { answers[i] = chain->Get(request_); });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(Compiles(), 1);
  for (const auto& a : answers) {
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->program, answers[0]->program);
  }
}

}  // namespace
}  // namespace torch_neuron::cache

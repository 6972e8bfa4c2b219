#include "runtime/kernel_team.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "runtime/fork_guard.h"

namespace torch_neuron::runtime {

namespace {

// The most threads one call may use: a bound on a misconfigured value, far
// above any host this runs on.
constexpr int kMaxThreads = 256;

int HostCores() { return std::max(1u, std::thread::hardware_concurrency()); }

thread_local int kernel_threads = 1;

}  // namespace

KernelTeam& KernelTeam::Global() {
  // Never destroyed (kernels may run while the interpreter exits). After a
  // fork the child has none of the parent's workers: it starts its own team
  // and leaves the copied one alone.
  static std::atomic<KernelTeam*> team{nullptr};
  static std::atomic<pid_t> owner{0};
  KernelTeam* current = team.load(std::memory_order_acquire);
  if (current != nullptr && owner.load(std::memory_order_acquire) == ::getpid()) return *current;
  static absl::Mutex create_mu;
  absl::MutexLock lock(&create_mu);
  if (team.load(std::memory_order_relaxed) == nullptr ||
      owner.load(std::memory_order_relaxed) != ::getpid()) {
    team.store(new KernelTeam(), std::memory_order_release);
    owner.store(::getpid(), std::memory_order_release);
  }
  return *team.load(std::memory_order_relaxed);
}

KernelTeam::~KernelTeam() {
  std::vector<std::thread> workers;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
}

void KernelTeam::StartWorkers(int count) {
  if (static_cast<int>(workers_.size()) < count) NoteRuntimeThreadStarted();
  while (static_cast<int>(workers_.size()) < count) workers_.emplace_back([this] { Work(); });
}

void KernelTeam::RunPieces(Job& job) {
  while (job.next < job.pieces) {
    const int64_t piece = job.next++;
    mu_.Unlock();
    std::exception_ptr error = nullptr;
    try {
      job.fn(piece);
    } catch (...) {
      error = std::current_exception();
    }
    mu_.Lock();
    --job.unfinished;
    if (error != nullptr && job.error == nullptr) {
      job.error = error;
      job.unfinished -= job.pieces - job.next;  // the rest is abandoned
      job.next = job.pieces;
    }
  }
}

void KernelTeam::Work() {
  pthread_setname_np(pthread_self(), "neuron-kernel");  // for perf, top and gdb
  absl::MutexLock lock(&mu_);
  while (true) {
    auto wanted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || (job_ != nullptr && job_->helpers > 0 && job_->next < job_->pieces);
    };
    mu_.Await(absl::Condition(&wanted));
    if (stop_) return;
    Job& job = *job_;
    --job.helpers;
    RunPieces(job);
  }
}

void KernelTeam::Run(int64_t pieces, int threads, absl::FunctionRef<void(int64_t)> fn) {
  threads = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(threads, pieces), 1, kMaxThreads));
  // One thread, or the workers busy with another device's call: run here.
  if (threads == 1 || !run_mu_.TryLock()) {
    for (int64_t piece = 0; piece < pieces; ++piece) fn(piece);
    return;
  }
  std::exception_ptr error = nullptr;
  {
    Job job{fn, pieces, 0, pieces, threads - 1};
    absl::MutexLock lock(&mu_);
    StartWorkers(threads - 1);
    job_ = &job;
    RunPieces(job);
    auto finished = [&job]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return job.unfinished == 0; };
    mu_.Await(absl::Condition(&finished));
    job_ = nullptr;
    error = job.error;
  }
  run_mu_.Unlock();
  if (error != nullptr) std::rethrow_exception(error);
}

int KernelThreads() { return kernel_threads; }

ScopedKernelThreads::ScopedKernelThreads(int threads) : saved_(kernel_threads) {
  kernel_threads = threads > 0 ? std::min(threads, kMaxThreads) : HostCores();
}

ScopedKernelThreads::~ScopedKernelThreads() { kernel_threads = saved_; }

namespace {

// The OpenMP runtime torch loaded; null pointers without one.
struct OpenMp {
  using Set = void (*)(int);
  using Get = int (*)();
  Set set = reinterpret_cast<Set>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  Get get = reinterpret_cast<Get>(::dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
};

const OpenMp& OpenMpRuntime() {
  static const OpenMp* omp = new OpenMp();
  return *omp;
}

}  // namespace

void SetThisThreadsOpenMpThreads(int threads) {
  if (OpenMpRuntime().set != nullptr) OpenMpRuntime().set(threads);
}

ScopedLibraryThreads::ScopedLibraryThreads(int64_t elements) {
  if (elements < kLibraryTeamElements || kernel_threads <= 1) return;
  const OpenMp& omp = OpenMpRuntime();
  if (omp.set == nullptr || omp.get == nullptr) return;
  const int current = omp.get();
  if (current >= kernel_threads) return;
  saved_ = current;
  omp.set(kernel_threads);
}

ScopedLibraryThreads::~ScopedLibraryThreads() {
  if (saved_ > 0) OpenMpRuntime().set(saved_);
}

}  // namespace torch_neuron::runtime

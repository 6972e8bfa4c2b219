// KernelTeam: the host threads that split one generated-kernel call.
//
// The emulated device's queue thread runs its OpenMP regions with a team of one
// (execution_queue.cc: two OpenMP teams spinning against each other on a small
// host slowed executions a hundredfold), so ATen's intra-op pool gives a
// kernel called there a single thread. A generated kernel is split across this
// team instead: worker threads that sleep on a condition when idle, so they
// never spin against the Python thread's own OpenMP team. A large library call
// (ScopedLibraryThreads) gets an OpenMP team of the same size for its run.
//
// The team's size per call comes from the config (TORCH_NEURON_KERNEL_THREADS),
// captured when a graph is queued and installed for its execution with
// ScopedKernelThreads; off the queue threads a kernel runs on one thread.
//
// Thread-safe. One call at a time uses the workers; a concurrent call (another
// device's queue) runs its pieces on its own thread.
#pragma once

#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace torch_neuron::runtime {

class KernelTeam {
 public:
  // The process's team; its workers start on first use. A process forked from
  // one that had a team gets a new one (threads do not survive fork).
  static KernelTeam& Global();

  KernelTeam() = default;
  ~KernelTeam();  // joins the workers
  KernelTeam(const KernelTeam&) = delete;
  KernelTeam& operator=(const KernelTeam&) = delete;

  // Calls fn(piece) once for every piece in [0, pieces), on at most `threads`
  // threads, the caller one of them; returns when every call has returned.
  // If a call throws, the first exception is rethrown here, on the caller,
  // once every claimed piece has returned (never on a worker, where it would
  // terminate the process); pieces not yet claimed are skipped.
  void Run(int64_t pieces, int threads, absl::FunctionRef<void(int64_t)> fn);

 private:
  struct Job {
    absl::FunctionRef<void(int64_t)> fn;
    int64_t pieces;
    int64_t next = 0;                    // the next piece to claim
    int64_t unfinished;                  // pieces claimed or not yet claimed that have not returned
    int helpers;                         // workers that may still join
    std::exception_ptr error = nullptr;  // the first exception a piece threw
  };

  // Claims and runs pieces of `job` until none is left. Called with mu_ held;
  // releases it around each fn call.
  void RunPieces(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Work();
  void StartWorkers(int count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Held by the one Run that uses the workers.
  absl::Mutex run_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  Job* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
};

// How many threads a kernel called on this thread may use (1 unless a
// ScopedKernelThreads is active).
int KernelThreads();

// Sets KernelThreads() on this thread for its lifetime; 0 means one per host core.
class ScopedKernelThreads {
 public:
  explicit ScopedKernelThreads(int threads);
  ~ScopedKernelThreads();
  ScopedKernelThreads(const ScopedKernelThreads&) = delete;
  ScopedKernelThreads& operator=(const ScopedKernelThreads&) = delete;

 private:
  int saved_;
};

// Library calls (matmul, convolution: ATen's own kernels) on a queue thread
// run with one OpenMP thread, except a call that reads at least this many
// elements: it gets KernelThreads() OpenMP threads while it runs (a GPT-2-sized
// step's matmuls take seconds on one core), and the team sleeps again after it.
// Below this size a call takes too little time for a team to pay for waking
// and spinning against the Python thread.
inline constexpr int64_t kLibraryTeamElements = int64_t{1} << 18;

// Sets the OpenMP team size of this thread's regions (the ICV is per thread),
// through the OpenMP runtime torch loaded, resolved at run time (linking
// another would clash). Does nothing without one.
void SetThisThreadsOpenMpThreads(int threads);

// For its lifetime, OpenMP regions on this thread use KernelThreads() threads
// when `elements` reaches kLibraryTeamElements (otherwise nothing changes).
class ScopedLibraryThreads {
 public:
  explicit ScopedLibraryThreads(int64_t elements);
  ~ScopedLibraryThreads();
  ScopedLibraryThreads(const ScopedLibraryThreads&) = delete;
  ScopedLibraryThreads& operator=(const ScopedLibraryThreads&) = delete;

 private:
  int saved_ = 0;  // the OpenMP team size to restore; 0: unchanged
};

}  // namespace torch_neuron::runtime

// Background compile workers: jobs run in the order queued on
// max(1, cores - 1) threads (at most 4), started on the first job and living
// for the rest of the process. Eager mode's group compiles and the tier-1
// compiles of tiered compilation run on them. A running job holds off fork()
// (runtime::ForkQuietScope) so a forked child inherits no half-held lock.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

namespace torch_neuron::cache {

class CompilePool {
 public:
  // `name` names the workers' threads in profiler traces ("<name> N").
  explicit CompilePool(std::string name);
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // Queues `job`, which must not throw (it catches what it calls).
  void Submit(std::function<void()> job);

  // Waits until every job queued so far has finished.
  void WaitIdle();

  // Forgets the jobs no worker has started (the process is exiting: a compile
  // whose result nobody will use only delays it).
  void DropQueued();

 private:
  void StartWorkers();  // under mu_
  void Work();

  const std::string name_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> jobs_;
  int unfinished_ = 0;
  bool started_ = false;
};

}  // namespace torch_neuron::cache

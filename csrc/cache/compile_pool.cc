#include "cache/compile_pool.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "runtime/fork_guard.h"
#include "base/profiler.h"

namespace torch_neuron::cache {

CompilePool::CompilePool(std::string name) : name_(std::move(name)) {}

void CompilePool::StartWorkers() {
  if (started_) return;
  started_ = true;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned n = std::min(4u, std::max(1u, cores - 1));
  for (unsigned i = 0; i < n; ++i) {
    std::thread([this, i] {
      profiler::NameThisThread(name_ + " " + std::to_string(i + 1));
      Work();
    }).detach();
  }
}

void CompilePool::Submit(std::function<void()> job) {
  // Idle workers hold nothing a forked child could trip on; working ones do.
  runtime::NoteRuntimeThreadStarted();
  {
    std::lock_guard<std::mutex> lock(mu_);
    StartWorkers();
    jobs_.push_back(std::move(job));
    ++unfinished_;
  }
  ready_.notify_one();
}

void CompilePool::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return unfinished_ == 0; });
}

void CompilePool::DropQueued() {
  std::lock_guard<std::mutex> lock(mu_);
  unfinished_ -= static_cast<int>(jobs_.size());
  jobs_.clear();
  if (unfinished_ == 0) idle_.notify_all();
}

void CompilePool::Work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [this] { return !jobs_.empty(); });
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    {
      runtime::ForkQuietScope quiet;  // a fork waits for the compile to end
      job();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--unfinished_ == 0) idle_.notify_all();
    }
  }
}

}  // namespace torch_neuron::cache

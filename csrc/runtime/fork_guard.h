// Fork safety of the runtime.
//
// A process forked from one whose runtime had started threads (a device's
// execution queue, the kernel team) inherits their locks, queued work and
// half-finished executions, but not the threads: a lock one of them held, or a
// queue it was draining, would block the child forever. Such a child is "in a
// bad fork", as torch.cuda calls it: device work raises BadForkError() (use
// the 'spawn' start method), device blocks it inherited are left alone when
// it drops them (they are its copy of the parent's memory), and
// torch.manual_seed skips the neuron generators (torch.neuron._is_in_bad_fork).
// A child that only touches CPU data (a DataLoader worker) never notices.
//
// A process forked before any runtime thread started is a clean process: it
// starts its own threads when it first needs them.
//
// Even a child that never touches the device shares libraries with the parent's
// runtime threads: a thread that was calling an ATen op for the first time at
// the fork held that op's one-time initialization guard, and the child's first
// call of the same op (on CPU) would wait on it forever. So fork() first waits
// for the runtime threads to finish the unit of work they are in (a queued
// execution, a background compile) and holds back new units until it returns,
// for at most kForkQuietLimit: a unit that cannot finish before the fork (a
// collective waiting for a peer) must not block it for good.
//
// Thread-safe. Torch-free.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace torch_neuron::runtime {

// Called when a runtime thread starts; the first call installs the handler
// that marks forked children.
void NoteRuntimeThreadStarted();

// Marks the calling runtime thread busy for the object's lifetime: a fork
// waits (bounded) for it to end, and a unit that would start while a fork is
// under way waits for the fork. Nests.
class ForkQuietScope {
 public:
  ForkQuietScope();
  ~ForkQuietScope();
  ForkQuietScope(const ForkQuietScope&) = delete;
  ForkQuietScope& operator=(const ForkQuietScope&) = delete;
};

// How long a fork waits for runtime threads to finish their units of work.
inline constexpr int kForkQuietLimitMs = 5000;

// How many forks went ahead while a runtime unit still ran (the wait timed out).
int64_t ForksWithoutQuiet();

// How many runtime units are in progress now (tests).
int UnitsBusy();

// In a forked child: how many runtime units were in progress when it was
// forked (0 unless the fork's wait timed out). -1 in a process not forked
// from a running runtime.
int UnitsBusyAtFork();

// True in a child forked after a runtime thread had started.
bool InBadFork();

// FAILED_PRECONDITION: what a bad-fork child is told when it uses a device.
absl::Status BadForkError();

}  // namespace torch_neuron::runtime

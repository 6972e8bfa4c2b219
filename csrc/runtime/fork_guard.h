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
// Thread-safe. Torch-free.
#pragma once

#include "absl/status/status.h"

namespace torch_neuron::runtime {

// Called when a runtime thread starts; the first call installs the handler
// that marks forked children.
void NoteRuntimeThreadStarted();

// True in a child forked after a runtime thread had started.
bool InBadFork();

// FAILED_PRECONDITION: what a bad-fork child is told when it uses a device.
absl::Status BadForkError();

}  // namespace torch_neuron::runtime

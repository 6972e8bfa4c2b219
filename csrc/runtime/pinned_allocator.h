// The pinned host allocator: what tensor.pin_memory() and a DataLoader with
// pin_memory=True allocate from, as CUDA's page-locked host memory. On the
// emulated device every host page is equally reachable, so pinning buys no
// speed here; the memory is locked when the host allows it (mlock, best
// effort) and, as on CUDA, a pinned tensor says so (is_pinned()) and copies
// from it to neuron are transfers like any other.
//
// Thread-safe.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_neuron::runtime {

c10::Allocator* PinnedHostAllocator();

// True if `ptr` is the start of a live block of the pinned allocator.
bool IsPinnedHostPtr(const void* ptr);

}  // namespace torch_neuron::runtime

// The shared objects of tier-1 programs (generated kernels), by name. A
// program carries its objects' bytes (in memory and in its NEFF); loading the
// program registers them here (LoadNativeObjects: the one load path, whether the
// program was compiled here, read from disk or compiled by another process), and
// the first call of one of its kernels loads the object (dlopen of a private
// temporary copy) and looks the kernel up. The compiler registers nothing.
//
// Thread-safe: registration happens on the loading thread, lookups on the
// device queues.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace torch_neuron::runtime {

// extern "C" void kernel(const void* const* in, void* const* out,
//                        const double* scalars, int64_t begin, int64_t end)
using KernelFn = void (*)(const void* const*, void* const*, const double*, int64_t, int64_t);

// A flat kernel's strided general path, kernel + "_strided": the same, and
// `geometry` = rank, sizes, then each input's strides (in elements).
using StridedKernelFn = void (*)(const void* const*, void* const*, const double*, int64_t, int64_t,
                                 const int64_t*);

// Registers `bytes` under `name` (a content hash, so one name is one object);
// a second registration of the name is a no-op.
void RegisterNativeLibrary(const std::string& name, std::string bytes);

// Registers each (name, bytes) object of a program being loaded.
void LoadNativeObjects(const std::vector<std::pair<std::string, std::string>>& objects);

// The kernel `symbol` of library `name`: NOT_FOUND for an unregistered name or
// a missing symbol, DATA_LOSS when the bytes do not load.
absl::StatusOr<KernelFn> FindKernel(const std::string& name, const std::string& symbol);

// The strided general path of flat kernel `symbol` (symbol + "_strided").
absl::StatusOr<StridedKernelFn> FindStridedKernel(const std::string& name, const std::string& symbol);

}  // namespace torch_neuron::runtime

// The shared objects of tier-1 programs (generated kernels), by name. A
// program's NEFF carries the object's bytes; compiling or loading the program
// registers them here, and the first call of one of its kernels loads the
// object (dlopen of a private temporary copy) and looks the kernel up.
//
// Thread-safe: registration happens on the compiling thread, lookups on the
// device queues.
#pragma once

#include <cstdint>
#include <string>

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

// The kernel `symbol` of library `name`: NOT_FOUND for an unregistered name or
// a missing symbol, DATA_LOSS when the bytes do not load.
absl::StatusOr<KernelFn> FindKernel(const std::string& name, const std::string& symbol);

// The strided general path of flat kernel `symbol` (symbol + "_strided").
absl::StatusOr<StridedKernelFn> FindStridedKernel(const std::string& name, const std::string& symbol);

}  // namespace torch_neuron::runtime

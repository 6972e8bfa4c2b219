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
#include "runtime/kernel_abi.h"

namespace torch_neuron::runtime {

using kernel_abi::KernelFn;         // runtime/kernel_abi.h
using kernel_abi::StridedKernelFn;  // runtime/kernel_abi.h

// Registers `bytes` under `name` (a content hash, so one name is one object);
// a second registration of the name is a no-op.
void RegisterNativeLibrary(const std::string& name, std::string bytes);

// Registers each (name, bytes) object of a program being loaded.
void LoadNativeObjects(const std::vector<std::pair<std::string, std::string>>& objects);

// The kernel `symbol` of library `name`: NOT_FOUND for an unregistered name or
// a missing symbol, DATA_LOSS when the bytes do not load, FAILED_PRECONDITION
// when the library was generated for another kernel ABI (kernel_abi::kVersion).
absl::StatusOr<KernelFn> FindKernel(const std::string& name, const std::string& symbol);

// The strided general path of flat kernel `symbol` (symbol + "_strided").
absl::StatusOr<StridedKernelFn> FindStridedKernel(const std::string& name, const std::string& symbol);

}  // namespace torch_neuron::runtime

// The NEFF file layout (see csrc/proto/neff.proto for the payload).
#pragma once

#include <cstddef>
#include <cstdint>

namespace torch_neuron::neff {

inline constexpr char kMagic[8] = {'T', 'N', 'N', 'E', 'F', 'F', '\0', '\1'};
// 2: instructions say how their outputs spread over the op's returns
// (return_widths), so an op returning (Tensor[], Tensor) is read right.
// 3: generated kernels are called by typed KernelCall instructions, not as
// the neuron::fused_kernel operator with positional arguments.
inline constexpr uint32_t kFormatVersion = 3;
inline constexpr size_t kHeaderSize = 32;
// Refuse payloads larger than this (a corrupt length must not drive allocation).
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{4} << 30;
// Bounds on program structure checked by the reader.
inline constexpr int64_t kMaxRegisters = 1 << 24;

}  // namespace torch_neuron::neff

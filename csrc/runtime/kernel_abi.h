// The kernel ABI: the contract between the code the compiler generates for
// tier-1 programs and the runtime that calls it. Standalone (nothing but
// <cstdint>): the compiler, the runtime and the generated sources' assembly
// all read it, and nothing here depends on either side.
//
// What it fixes:
//   - the C signatures of a generated kernel and of a flat kernel's strided
//     path, and the symbol every generated library exports with its version;
//   - the loop quanta (threads split a call only at multiples of them, so no
//     block straddles two threads) and the strided-rank limit;
//   - the extent codes of row kernels' values.
// The instruction that calls a kernel is typed (runtime/program.h KernelCall,
// and its NEFF message), not positional operator arguments.
// Any change here changes kVersion. The version is part of the compiler's
// fingerprint (cached executables of another ABI are never loaded), and the
// runtime refuses a library that exports another version.
#pragma once

#include <cstddef>
#include <cstdint>

namespace torch_neuron::runtime::kernel_abi {

inline constexpr int kVersion = 2;

// Every generated library defines `extern "C" const int tn_kernel_abi_version`
// equal to the kVersion it was generated for.
inline constexpr const char* kVersionSymbol = "tn_kernel_abi_version";

// extern "C" void <kernel>(const void* const* in, void* const* out,
//                          const double* scalars, int64_t begin, int64_t end)
// A flat kernel's [begin, end) counts elements, a row kernel's rows, a column
// kernel's columns. in[i] and out[k] point at element 0 of input i, output k.
using KernelFn = void (*)(const void* const*, void* const*, const double*, int64_t, int64_t);

// A flat kernel's strided path, <kernel> + kStridedSuffix: the same, and
// `geometry` = rank, sizes, then each input's strides (in elements).
using StridedKernelFn = void (*)(const void* const*, void* const*, const double*, int64_t, int64_t,
                                 const int64_t*);
inline constexpr const char* kStridedSuffix = "_strided";

// Elements per block of a flat kernel's loop.
inline constexpr int64_t kKernelBlock = 512;
// Columns per block of a column kernel.
inline constexpr int64_t kColumnBlock = 256;
// The most dims a flat kernel's strided path indexes; an input of more is
// made contiguous before the call.
inline constexpr int64_t kMaxStridedRank = 8;

// How much of a row kernel's domain (rows x row_length) a value holds.
enum class Extent : uint8_t {
  kElement = 0,  // one value per element
  kRow = 1,      // one per row (a reduction over the row)
  kColumn = 2,   // one per row position (a reduction over the rows)
  kOne = 3,      // one value
};
inline constexpr int64_t kNumExtents = 4;

// The number of values of `extent` in a domain of rows x row_length.
constexpr int64_t ExtentNumel(Extent extent, int64_t rows, int64_t row_length) {
  switch (extent) {
    case Extent::kElement:
      return rows * row_length;
    case Extent::kRow:
      return rows;
    case Extent::kColumn:
      return row_length;
    case Extent::kOne:
      return 1;
  }
  return 0;
}

}  // namespace torch_neuron::runtime::kernel_abi

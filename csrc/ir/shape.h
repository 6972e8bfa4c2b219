// Shape: the dtype and sizes of one IR value. Lazy values are always
// contiguous, so strides are implied.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ir/hash.h"

namespace torch_neuron::ir {

class Shape {
 public:
  Shape() = default;
  Shape(c10::ScalarType dtype, std::vector<int64_t> sizes) : dtype_(dtype), sizes_(std::move(sizes)) {}

  c10::ScalarType dtype() const { return dtype_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const;

  // "f32[64,2]"; a scalar is "f32[]".
  std::string ToString() const;

  bool operator==(const Shape& other) const { return dtype_ == other.dtype_ && sizes_ == other.sizes_; }
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  c10::ScalarType dtype_ = c10::ScalarType::Float;
  std::vector<int64_t> sizes_;
};

hash_t Hash(const Shape& shape);
// The same hash of a dtype and sizes not held in a Shape (no copy).
hash_t HashShape(c10::ScalarType dtype, c10::IntArrayRef sizes);

// Short dtype names used in IR text: f32, bf16, i64, b8, ...
const char* DtypeShortName(c10::ScalarType dtype);

}  // namespace torch_neuron::ir

#include "ir/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/dtypes.h"

namespace torch_neuron::ir {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes_) n *= s;
  return n;
}

std::string Shape::ToString() const {
  return absl::StrCat(DtypeShortName(dtype_), "[", absl::StrJoin(sizes_, ","), "]");
}

hash_t Hash(const Shape& shape) { return HashShape(shape.dtype(), shape.sizes()); }

hash_t HashShape(c10::ScalarType dtype, c10::IntArrayRef sizes) {
  return HashTagged(kTagShape + static_cast<uint64_t>(dtype), sizes.data(), sizes.size() * sizeof(int64_t));
}

const char* DtypeShortName(c10::ScalarType dtype) {
  const DtypeFacts* facts = FactsOf(dtype);
  return facts != nullptr ? facts->short_name : c10::toString(dtype);
}

}  // namespace torch_neuron::ir

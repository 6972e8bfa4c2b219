#include "ir/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torch_neuron::ir {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes_) n *= s;
  return n;
}

std::string Shape::ToString() const {
  return absl::StrCat(DtypeShortName(dtype_), "[", absl::StrJoin(sizes_, ","), "]");
}

hash_t Hash(const Shape& shape) {
  return HashTagged(kTagShape + static_cast<uint64_t>(shape.dtype()), shape.sizes().data(),
                    shape.sizes().size() * sizeof(int64_t));
}

const char* DtypeShortName(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
      return "f32";
    case c10::ScalarType::Double:
      return "f64";
    case c10::ScalarType::Half:
      return "f16";
    case c10::ScalarType::BFloat16:
      return "bf16";
    case c10::ScalarType::Byte:
      return "u8";
    case c10::ScalarType::Char:
      return "i8";
    case c10::ScalarType::Short:
      return "i16";
    case c10::ScalarType::Int:
      return "i32";
    case c10::ScalarType::Long:
      return "i64";
    case c10::ScalarType::UInt16:
      return "u16";
    case c10::ScalarType::UInt32:
      return "u32";
    case c10::ScalarType::UInt64:
      return "u64";
    case c10::ScalarType::Bool:
      return "b8";
    default:
      return c10::toString(dtype);
  }
}

}  // namespace torch_neuron::ir

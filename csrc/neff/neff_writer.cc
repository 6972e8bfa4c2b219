#include "neff/neff_writer.h"

#include <xxhash.h>

#include <cstring>

#include "neff/neff_format.h"

namespace torch_neuron::neff {
namespace {

void PutLittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

absl::StatusOr<std::string> WriteNeff(proto::NeffPayload& payload) {
  payload.set_format_version(kFormatVersion);
  std::string body;
  if (!payload.SerializeToString(&body)) return absl::InternalError("NEFF payload did not serialize");
  std::string out(kMagic, sizeof(kMagic));
  PutLittleEndian(&out, kFormatVersion, 4);
  PutLittleEndian(&out, 0, 4);
  PutLittleEndian(&out, body.size(), 8);
  PutLittleEndian(&out, XXH3_64bits(body.data(), body.size()), 8);
  out += body;
  return out;
}

}  // namespace torch_neuron::neff

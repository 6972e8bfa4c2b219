// libFuzzer target for the remote cache's entry reader: whatever bytes Redis
// holds under a key (written by anyone), opening them with a fleet key, taking
// them without one, and reading the NEFF inside must give a Status, never a
// crash, a hang or an out-of-bounds read. An entry sealed for the bytes must
// open to exactly them (run under ASan by `make fuzz`).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cache/entry_signature.h"
#include "compiler/fingerprint.h"
#include "neff/neff_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace cache = torch_neuron::cache;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kKey = "fuzz fleet key";
  constexpr std::string_view kRedisKey = "torch_neuron:neff:00000000000000000000000000000000";
  absl::StatusOr<std::string_view> opened = cache::OpenEntry(kKey, kRedisKey, bytes);
  if (opened.ok()) (void)torch_neuron::neff::ReadNeff(*opened, nullptr);
  (void)torch_neuron::neff::ReadNeff(cache::UncheckedPayload(bytes),
                                     &torch_neuron::compiler::FingerprintFor(0));
  // A key holder's own entry of these bytes round-trips.
  const std::string sealed = cache::SealEntry(kKey, kRedisKey, bytes);
  absl::StatusOr<std::string_view> own = cache::OpenEntry(kKey, kRedisKey, sealed);
  if (!own.ok() || *own != bytes) std::abort();
  return 0;
}

// libFuzzer target for the NEFF reader: any bytes must give a Status, never a
// crash, a hang or an out-of-bounds read (run under ASan by `make fuzz`).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compiler/compiler.h"
#include "compiler/fingerprint.h"
#include "neff/neff_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)torch_neuron::neff::ReadNeff(bytes, nullptr);
  (void)torch_neuron::neff::ReadNeff(bytes, &torch_neuron::compiler::FingerprintFor(0));
  return 0;
}

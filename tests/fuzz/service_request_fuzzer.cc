// libFuzzer target for the compile service's request reader (what it makes of
// a frame read from its socket): any bytes must give a request or a Status,
// never a crash, a hang or an out-of-bounds read (run under ASan by
// `make fuzz FUZZ_TARGET=service_request_fuzzer`).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "service/server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view frame(reinterpret_cast<const char*>(data), size);
  (void)torch_neuron::service::ParseServiceRequest(frame);
  return 0;
}

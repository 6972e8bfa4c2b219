// libFuzzer target for the CompileRequest reader (what the compile service
// reads from its socket): any bytes must give a Status, never a crash, a hang
// or an out-of-bounds read; a request that reads must compile to a program or
// an error (run under ASan by `make fuzz FUZZ_TARGET=compile_request_fuzzer`).
// The first byte picks the mode: odd, the stored graph hash is taken from the
// nodes (so mutated graphs reach the compiler); even, it is checked, as the
// service checks it.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

#include "compiler/compile_request.h"
#include "compiler/compiler.h"
#include "compiler/host/host_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using torch_neuron::compiler::StoredHash;
  const StoredHash stored = (data[0] & 1) ? StoredHash::kReplace : StoredHash::kVerify;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto read = torch_neuron::compiler::ParseCompileRequest(bytes, stored);
  if (!read.ok()) return 0;
  // The compiler takes requests: the graph read, written again (with the
  // nodes' own hash in kReplace mode).
  auto request = torch_neuron::compiler::MakeCompileRequest((*read)->graph, (*read)->options);
  if (!request.ok()) return 0;
  torch_neuron::compiler::CompileOptions options = (*read)->options;
  options.opt_level = 0;  // tier 1 would run the system compiler per input
  static const torch_neuron::compiler::HostTarget* target = new torch_neuron::compiler::HostTarget();
  try {
    (void)torch_neuron::compiler::Compile(*request, options, *target);
  } catch (const std::exception&) {
    // An ATen error from constant folding on attributes a fuzzer made: the
    // service catches these per request; only a crash is a finding here.
  }
  return 0;
}

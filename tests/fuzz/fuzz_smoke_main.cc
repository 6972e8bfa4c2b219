// A bounded fuzzing run without libFuzzer, for ctest on any compiler: seeds are
// valid NEFFs compiled in-process, mutated at random (byte flips, truncation,
// insertion, splicing, header fields; half re-framed with a valid checksum)
// for a fixed number of iterations with a
// fixed seed, each fed to LLVMFuzzerTestOneInput. `make fuzz` runs the real
// coverage-guided libFuzzer binary under ASan.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <string>
#include <vector>

#include "compiler/compile_request.h"
#include "compiler/compiler.h"
#include "compiler/host/host_target.h"
#include "ir/graph.h"
#include "mutate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace torch_neuron {
namespace {

std::string SeedNeff() {
  using ir::Arg;
  const ir::Shape shape(c10::ScalarType::Float, {3});
  ir::Value x{ir::Node::MakeDeviceData(shape, nullptr), 0};
  ir::Value s{ir::Node::MakeScalar(2.5, c10::ScalarType::Double), 0};
  ir::Value y{ir::Node::MakeOp("aten::mul.Tensor", {x, s}, {Arg::Operand(0), Arg::Operand(1)}, {shape}), 0};
  ir::Value z{ir::Node::MakeOp("aten::sum", {y}, {Arg::Operand(0), Arg::Attr(c10::IValue())},
                               {ir::Shape(c10::ScalarType::Float, {})}),
              0};
  ir::CanonicalGraph g = ir::Canonicalize({z, y});
  auto request = compiler::MakeCompileRequest(g, compiler::CompileOptions());
  EXPECT_TRUE(request.ok());
  auto compiled = compiler::Compile(*request, compiler::CompileOptions(), compiler::HostTarget());
  EXPECT_TRUE(compiled.ok());
  return compiled.ok() ? compiled->neff : "";
}

TEST(NeffReaderFuzzSmoke, TwentyThousandMutationsNeverCrash) {
  const std::string seed = SeedNeff();
  std::mt19937_64 rng(20261130);
  auto pick = [&](size_t n) { return fuzz::Pick(rng, n); };
  for (int i = 0; i < 20000; ++i) {
    std::string input = seed;
    const int mutations = 1 + static_cast<int>(pick(4));
    for (int m = 0; m < mutations; ++m) {
      if (pick(5) < 4) {
        fuzz::MutateOnce(input, seed, rng);
      } else if (input.size() >= 32) {  // overwrite a header word (length, checksum, version)
        input[8 + pick(24)] = static_cast<char>(rng());
      }
    }
    // Half the inputs get a correct header for their (mutated) payload, so the
    // checks behind the checksum are exercised too.
    if (i % 2 == 0 && input.size() >= 32) {
      const std::string body = input.substr(32);
      const uint64_t length = body.size(), sum = XXH3_64bits(body.data(), body.size());
      for (int b = 0; b < 8; ++b) input[16 + b] = static_cast<char>((length >> (8 * b)) & 0xff);
      for (int b = 0; b < 8; ++b) input[24 + b] = static_cast<char>((sum >> (8 * b)) & 0xff);
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
}

}  // namespace
}  // namespace torch_neuron

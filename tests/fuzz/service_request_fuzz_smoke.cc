// A bounded fuzzing run of the compile service's request reader for ctest:
// valid requests (a compile request of a graph with every kind of leaf, a
// status request) mutated at random, a fixed number of times with a fixed seed.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "compiler/compile_request.h"
#include "compiler/fingerprint.h"
#include "ir/graph.h"
#include "mutate.h"
#include "service/framing.h"
#include "service/server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace torch_neuron {
namespace {

std::string SeedCompile() {
  using ir::Arg;
  using ir::Node;
  using ir::Value;
  const ir::Shape shape(c10::ScalarType::Float, {4});
  Value x{Node::MakeDeviceData(shape, nullptr), 0};
  Value s{Node::MakeScalar(0.5, c10::ScalarType::Double), 0};
  Value gen{Node::MakeGenerator(nullptr), 0};
  Value y{Node::MakeOp("aten::mul.Tensor", {x, s}, {Arg::Operand(0), Arg::Operand(1)}, {shape}), 0};
  Value r{Node::MakeOp("aten::bernoulli.p", {y, gen}, {Arg::Operand(0), Arg::Attr(0.5), Arg::Operand(1)}, {shape}),
          0};
  auto request = compiler::MakeCompileRequest(ir::Canonicalize({y}, {r}), compiler::CompileOptions());
  EXPECT_TRUE(request.ok()) << request.status();
  proto::ServiceRequest message;
  message.set_protocol_version(service::kProtocolVersion);
  *message.mutable_compile()->mutable_request() = *request;
  *message.mutable_compile()->mutable_fingerprint() = compiler::FingerprintFor(1);
  return message.SerializeAsString();
}

TEST(ServiceRequestFuzzSmoke, TwentyThousandMutationsNeverCrash) {
  proto::ServiceRequest status;
  status.set_protocol_version(service::kProtocolVersion);
  status.mutable_status();
  const std::string seeds[2] = {SeedCompile(), status.SerializeAsString()};
  for (const std::string& seed : seeds) ASSERT_TRUE(service::ParseServiceRequest(seed).ok());
  std::mt19937_64 rng(20261202);
  for (int i = 0; i < 20000; ++i) {
    const std::string& seed = seeds[i % 5 == 0 ? 1 : 0];
    std::string input = seed;
    const int mutations = 1 + static_cast<int>(fuzz::Pick(rng, 4));
    for (int m = 0; m < mutations; ++m) fuzz::MutateOnce(input, seed, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
}

}  // namespace
}  // namespace torch_neuron

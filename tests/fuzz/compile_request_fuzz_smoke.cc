// A bounded fuzzing run of the CompileRequest reader for ctest: a valid request
// (a graph of real ops and every kind of leaf) mutated at random for a fixed
// number of iterations with a fixed seed, each fed to LLVMFuzzerTestOneInput.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "compiler/compile_request.h"
#include "ir/graph.h"
#include "mutate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace torch_neuron {
namespace {

std::string SeedRequest() {
  using ir::Arg;
  using ir::Node;
  using ir::Value;
  const ir::Shape shape(c10::ScalarType::Float, {2, 3});
  Value x{Node::MakeDeviceData(shape, nullptr), 0};
  Value s{Node::MakeScalar(2.5, c10::ScalarType::Double), 0};
  Value one{Node::MakeScalar(int64_t{1}, c10::ScalarType::Long), 0};
  Value gen{Node::MakeGenerator(nullptr), 0};
  Value y{Node::MakeOp("aten::mul.Tensor", {x, s}, {Arg::Operand(0), Arg::Operand(1)}, {shape}), 0};
  Value a{Node::MakeOp("aten::add.Tensor", {y, x, one}, {Arg::Operand(0), Arg::Operand(1), Arg::Operand(2)},
                       {shape}),
          0};
  Value r{Node::MakeOp("aten::bernoulli.p", {a, gen}, {Arg::Operand(0), Arg::Attr(0.5), Arg::Operand(1)}, {shape}),
          0};
  Value z{Node::MakeOp("aten::sum.dim_IntList", {r},
                       {Arg::Operand(0), Arg::Attr(std::vector<int64_t>{1}), Arg::Attr(false), Arg::Attr(c10::IValue())},
                       {ir::Shape(c10::ScalarType::Float, {2})}),
          0};
  auto request = compiler::MakeCompileRequest(ir::Canonicalize({z, a}, {r}), compiler::CompileOptions());
  EXPECT_TRUE(request.ok()) << request.status();
  return request->SerializeAsString();
}

TEST(CompileRequestFuzzSmoke, TwentyThousandMutationsNeverCrash) {
  const std::string seed = SeedRequest();
  ASSERT_TRUE(compiler::ParseCompileRequest(seed).ok());
  std::mt19937_64 rng(20261202);
  int read = 0;  // mutations still a well-formed graph (hash taken from the nodes)
  for (int i = 0; i < 20000; ++i) {
    std::string input = seed;
    const int mutations = 1 + static_cast<int>(fuzz::Pick(rng, 4));
    for (int m = 0; m < mutations; ++m) fuzz::MutateOnce(input, seed, rng);
    // Half with the hash taken from the mutated nodes: they reach the compiler.
    read += compiler::ParseCompileRequest(input, compiler::StoredHash::kReplace).ok();
    input.insert(input.begin(), static_cast<char>(i % 2));
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  // The run is worth something only if many mutants are graphs the compiler gets.
  EXPECT_GT(read, 200) << "of 20000 mutations";
  std::printf("%d of 20000 mutations read as graphs\n", read);
  const std::string whole = std::string(1, '\0') + seed;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(whole.data()), whole.size());
}

}  // namespace
}  // namespace torch_neuron

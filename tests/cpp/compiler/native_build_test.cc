#include "compiler/native_build.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/metrics.h"

namespace torch_neuron::compiler {
namespace {

std::string Kernel(const std::string& name, int k) {
  return "extern \"C\" int " + name + "(int x) { return x * " + std::to_string(k) + " + 1; }\n";
}

int64_t Count(const char* name) { return metrics::GetCounter(name)->Value(); }

// Two graphs' kernel sets share a kernel: it is built once, and a second
// cache over the same directory (another process) builds nothing it holds.
TEST(KernelObjectCacheTest, AKernelSharedByTwoGraphsIsBuiltOnce) {
  const Toolchain& toolchain = Toolchain::For("");
  if (toolchain.version.empty()) GTEST_SKIP() << "no C++ compiler";
  const std::string dir = std::filesystem::temp_directory_path() / ("tn_kernels_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  KernelObjectCache objects(dir);
  const int64_t builds = Count("compile.kernel.build.count"), reuses = Count("compile.kernel.reuse.count");
  auto first = BuildSharedObject({{"k_a", Kernel("k_a", 2)}, {"k_b", Kernel("k_b", 3)}}, toolchain, &objects);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Count("compile.kernel.build.count") - builds, 2);
  auto second = BuildSharedObject({{"k_b", Kernel("k_b", 3)}, {"k_c", Kernel("k_c", 5)}}, toolchain, &objects);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Count("compile.kernel.build.count") - builds, 3);
  EXPECT_EQ(Count("compile.kernel.reuse.count") - reuses, 1);
  EXPECT_FALSE(second->empty());

  KernelObjectCache other(dir);  // another process over the same directory
  auto third = BuildSharedObject({{"k_a", Kernel("k_a", 2)}, {"k_c", Kernel("k_c", 5)}}, toolchain, &other);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(Count("compile.kernel.build.count") - builds, 3);
  EXPECT_EQ(Count("compile.kernel.reuse.count") - reuses, 3);

  // A stored object the linker refuses is dropped and the kernels built again.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << "not an object file";
  }
  KernelObjectCache broken(dir);
  auto rebuilt = BuildSharedObject({{"k_a", Kernel("k_a", 2)}}, toolchain, &broken);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(Count("compile.kernel.build.count") - builds, 4);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace torch_neuron::compiler

#include "compiler/native_build.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

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
  const std::string dir =
      std::filesystem::temp_directory_path() / ("tn_kernels_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  KernelObjectCache objects(dir);
  const int64_t builds = Count("compile.kernel.build.count"), reuses = Count("compile.kernel.reuse.count");
  auto first = BuildSharedObject({{"k_a", Kernel("k_a", 2)}, {"k_b", Kernel("k_b", 3)}}, toolchain, &objects);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Count("compile.kernel.build.count") - builds, 2);
  auto second =
      BuildSharedObject({{"k_b", Kernel("k_b", 3)}, {"k_c", Kernel("k_c", 5)}}, toolchain, &objects);
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

namespace torch_neuron::compiler {
namespace {

// The directory stays within its bound: the least recently used objects go.
TEST(KernelObjectCacheTest, TheDirectoryIsBoundedLeastRecentlyUsedFirst) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("tn_kernels_bound_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string object(1000, 'x');
  {
    KernelObjectCache objects(dir, /*max_memory_entries=*/0, /*max_disk_bytes=*/4500);
    for (const char* key : {"a", "b", "c", "d"}) {
      objects.Put(key, object);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct times
    }
    ASSERT_TRUE(objects.Find("a").has_value());  // a hit: "a" is now the most recent
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    objects.Put("e", object);  // 5000 bytes > 4500: down to 3/4 of it, oldest first
  }
  auto present = [&](const char* key) {
    return std::filesystem::exists(std::filesystem::path(dir) / (std::string(key) + ".o"));
  };
  EXPECT_FALSE(present("b"));
  EXPECT_FALSE(present("c"));
  EXPECT_TRUE(present("a"));
  EXPECT_TRUE(present("d"));
  EXPECT_TRUE(present("e"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace torch_neuron::compiler

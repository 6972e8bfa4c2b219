#include "compiler/host/native_build.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "base/metrics.h"
#include "compiler/kernel_codegen.h"
#include "runtime/kernel_abi.h"
#include "runtime/native_library.h"

namespace torch_neuron::compiler {
namespace {

std::string Kernel(const std::string& name, int k) {
  return "extern \"C\" int " + name + "(int x) { return x * " + std::to_string(k) + " + 1; }\n";
}

int64_t Count(const char* name) { return metrics::GetCounter(name)->Value(); }

// Two graphs' kernel sets share a kernel: it is built once, and a second
// cache over the same directory (another process) builds nothing it holds.
// The runtime loads a library only when it exports the kernel ABI version it
// calls: a library of another ABI (or of none) is refused by name, never
// called with arguments it does not take.
TEST(KernelAbiTest, TheRuntimeLoadsOnlyLibrariesOfItsAbiVersion) {
  const Toolchain& toolchain = Toolchain::For("");
  if (toolchain.version.empty()) GTEST_SKIP() << "no C++ compiler";
  const std::string kernel =
      "#include <cstdint>\n"
      "extern \"C\" void tn_twice(const void* const* in, void* const* out, const double*, int64_t b, int64_t "
      "e) {\n"
      "  for (int64_t i = b; i < e; ++i) static_cast<float*>(out[0])[i] = 2 * static_cast<const "
      "float*>(in[0])[i];\n"
      "}\n";
  auto current =
      BuildSharedObject({{"tn_twice", kernel}, {"tn_kernel_abi", AbiVersionSource()}}, toolchain, nullptr);
  auto none = BuildSharedObject({{"tn_twice", kernel}}, toolchain, nullptr);
  auto older =
      BuildSharedObject({{"tn_twice", kernel},
                         {"tn_kernel_abi", "extern \"C\" const int tn_kernel_abi_version = " +
                                               std::to_string(runtime::kernel_abi::kVersion - 1) + ";\n"}},
                        toolchain, nullptr);
  ASSERT_TRUE(current.ok() && none.ok() && older.ok());
  const std::string tag = std::to_string(::getpid());
  runtime::RegisterNativeLibrary("abi_current_" + tag, *current);
  runtime::RegisterNativeLibrary("abi_none_" + tag, *none);
  runtime::RegisterNativeLibrary("abi_older_" + tag, *older);

  absl::StatusOr<runtime::KernelFn> fn = runtime::FindKernel("abi_current_" + tag, "tn_twice");
  ASSERT_TRUE(fn.ok()) << fn.status();
  const float in[3] = {1, 2, 3};
  float out[3] = {};
  const void* ins[] = {in};
  void* outs[] = {out};
  (*fn)(ins, outs, nullptr, 0, 3);
  EXPECT_EQ(out[2], 6.0f);

  for (const char* name : {"abi_none_", "abi_older_"}) {
    absl::StatusOr<runtime::KernelFn> refused = runtime::FindKernel(name + tag, "tn_twice");
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
    EXPECT_NE(refused.status().message().find("this runtime calls kernel ABI " +
                                              std::to_string(runtime::kernel_abi::kVersion)),
              std::string::npos)
        << refused.status();
  }
}

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

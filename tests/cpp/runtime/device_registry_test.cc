#include "runtime/device_registry.h"

#include <gtest/gtest.h>

#include <thread>

namespace torch_neuron::runtime {
namespace {

DeviceConfig TwoDevices(int64_t limit = 0) {
  DeviceConfig c;
  c.num_devices = 2;
  c.memory_limit_bytes = limit;
  return c;
}

TEST(DeviceRegistryTest, CreatesOneArenaPerDeviceWithLimit) {
  DeviceRegistry registry(TwoDevices(1 << 20));
  EXPECT_EQ(registry.device_count(), 2);
  EXPECT_EQ(registry.arena(1).device_index(), 1);
  EXPECT_EQ(registry.arena(1).Stats().limit_bytes, 1 << 20);
}

TEST(DeviceRegistryTest, IndexOutOfRangeNamesValidRange) {
  DeviceRegistry registry(TwoDevices());
  EXPECT_TRUE(registry.CheckIndex(1).ok());
  absl::Status s = registry.CheckIndex(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "neuron device index 2 is out of range: this process has 2 neuron devices (valid "
            "indices 0..1; set TORCH_NEURON_NUM_DEVICES for more).");
  EXPECT_FALSE(registry.CheckIndex(-1).ok());
}

TEST(DeviceRegistryTest, CurrentDeviceIsPerThread) {
  DeviceRegistry registry(TwoDevices());
  ASSERT_TRUE(registry.SetCurrentDevice(1).ok());
  EXPECT_EQ(registry.current_device(), 1);
  EXPECT_EQ(registry.Resolve(-1), 1);
  int seen_in_other_thread = -1;
  std::thread([&] { seen_in_other_thread = registry.current_device(); }).join();
  EXPECT_EQ(seen_in_other_thread, 0);
  EXPECT_FALSE(registry.SetCurrentDevice(5).ok());
  EXPECT_EQ(registry.current_device(), 1);
  ASSERT_TRUE(registry.SetCurrentDevice(0).ok());
}

TEST(DeviceRegistryTest, FindOwnerLocatesTheArena) {
  DeviceRegistry registry(TwoDevices());
  void* p = *registry.arena(1).Allocate(100);
  EXPECT_EQ(registry.FindOwner(p), &registry.arena(1));
  int x;
  EXPECT_EQ(registry.FindOwner(&x), nullptr);
  registry.arena(1).Free(p);
}

}  // namespace
}  // namespace torch_neuron::runtime

#include "runtime/agent/gpu_inventory.h"

#include <gtest/gtest.h>

namespace gandiva::runtime {
namespace {

GpuInventoryOptions NoNvml() {
  GpuInventoryOptions o;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  return o;
}

TEST(GpuInventoryTest, VirtualWhenNvmlIsMissing) {
  GpuInventoryOptions o = NoNvml();
  o.virtual_gpus = 4;
  auto inv = GpuInventory::Discover(o);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_TRUE((*inv)->is_virtual());
  EXPECT_NE((*inv)->nvml_note().find("NVML not loaded"), std::string::npos);
  ASSERT_EQ((*inv)->gpus().size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const GpuInfo& g = (*inv)->gpus()[static_cast<size_t>(i)];
    EXPECT_EQ(g.local, i);
    EXPECT_EQ(g.uuid, "virtual-" + std::to_string(i));
    EXPECT_EQ(g.name, "virtual");
    EXPECT_EQ(g.socket, 0);
    EXPECT_EQ(g.pcie_switch, 0);
  }
  EXPECT_EQ((*inv)->Utilization({0, 1}), 0.0);
  EXPECT_EQ((*inv)->ProcessMemory({0}, {1}), 0);
}

TEST(GpuInventoryTest, VirtualTopology) {
  GpuInventoryOptions o = NoNvml();
  o.virtual_gpus = 8;
  o.sockets = 2;
  o.switches_per_socket = 2;
  auto inv = GpuInventory::Discover(o);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  const int sockets[] = {0, 0, 0, 0, 1, 1, 1, 1};
  const int switches[] = {0, 0, 1, 1, 2, 2, 3, 3};
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ((*inv)->gpus()[i].socket, sockets[i]) << i;
    EXPECT_EQ((*inv)->gpus()[i].pcie_switch, switches[i]) << i;
  }
  EXPECT_EQ((*inv)->sockets(), 2);
  EXPECT_EQ((*inv)->switches_per_socket(), 2);
}

TEST(GpuInventoryTest, ForcedVirtualAndBadTopology) {
  GpuInventoryOptions o;  // the real NVML name: not looked at
  o.virtual_only = true;
  o.virtual_gpus = 2;
  auto inv = GpuInventory::Discover(o);
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE((*inv)->is_virtual());
  EXPECT_NE((*inv)->nvml_note().find("--virtual-only"), std::string::npos);

  o.virtual_gpus = 6;
  o.sockets = 4;
  auto bad = GpuInventory::Discover(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("sockets"), std::string::npos);

  o.virtual_gpus = 0;
  o.sockets = 1;
  EXPECT_FALSE(GpuInventory::Discover(o).ok());
}

}  // namespace
}  // namespace gandiva::runtime

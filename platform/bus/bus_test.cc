// SPDX-License-Identifier: Apache-2.0
#include "platform/bus/bus.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dsec::bus {
namespace {

// Records the last access and answers reads with the low byte of the offset.
class RecordingDevice : public BusDevice {
 public:
  void Read(uint64_t offset, std::span<uint8_t> data) override {
    last_offset = offset;
    for (auto& b : data) b = static_cast<uint8_t>(offset);
    reads.fetch_add(1);
  }
  void Write(uint64_t offset, std::span<const uint8_t> data) override {
    last_offset = offset;
    last_size = data.size();
    writes.fetch_add(1);
  }
  std::atomic<uint64_t> last_offset{~0ull};
  std::atomic<size_t> last_size{0};
  std::atomic<int> reads{0};
  std::atomic<int> writes{0};
};

TEST(BusTest, RoutesAccessWithOffsetRelativeToBase) {
  Bus bus("pio");
  auto dev = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Insert(dev, 0x3f8, 8).ok());
  std::array<uint8_t, 1> b{};
  EXPECT_TRUE(bus.Read(0x3fd, b));
  EXPECT_EQ(dev->last_offset, 5u);
  EXPECT_EQ(b[0], 5);
  const std::array<uint8_t, 2> w{1, 2};
  EXPECT_TRUE(bus.Write(0x3fe, w));
  EXPECT_EQ(dev->last_offset, 6u);
  EXPECT_EQ(dev->last_size, 2u);
}

TEST(BusTest, UnclaimedReadReturnsAllOnesAndFalse) {
  Bus bus("mmio");
  std::array<uint8_t, 4> b{};
  EXPECT_FALSE(bus.Read(0x1000, b));
  for (uint8_t v : b) EXPECT_EQ(v, 0xff);
  EXPECT_FALSE(bus.Write(0x1000, b));
}

TEST(BusTest, AccessStraddlingRangeEndIsUnclaimed) {
  Bus bus("mmio");
  auto dev = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Insert(dev, 0x1000, 0x10).ok());
  std::array<uint8_t, 4> b{};
  EXPECT_TRUE(bus.Read(0x100c, b));
  EXPECT_FALSE(bus.Read(0x100e, b));
  EXPECT_FALSE(bus.Read(0xffe, b));
  EXPECT_EQ(dev->reads, 1);
}

TEST(BusTest, RejectsUnsupportedAccessSizes) {
  Bus bus("mmio");
  auto dev = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Insert(dev, 0, 0x100).ok());
  std::array<uint8_t, 3> three{};
  EXPECT_FALSE(bus.Read(0, three));
  EXPECT_FALSE(bus.Write(0, std::span<const uint8_t>()));
  EXPECT_EQ(dev->reads + dev->writes, 0);
}

TEST(BusTest, RejectsOverlapsOnEitherSide) {
  Bus bus("pio");
  auto dev = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Insert(dev, 0x100, 0x10).ok());
  EXPECT_EQ(bus.Insert(dev, 0x10f, 1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bus.Insert(dev, 0xf0, 0x11).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bus.Insert(dev, 0x0, 0x1000).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bus.Insert(dev, 0x104, 2).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(bus.Insert(dev, 0xf0, 0x10).ok());   // ends right below
  EXPECT_TRUE(bus.Insert(dev, 0x110, 0x10).ok());  // starts right above
  EXPECT_EQ(bus.range_count(), 3u);
}

TEST(BusTest, RejectsEmptyWrappingAndNullRanges) {
  Bus bus("mmio");
  auto dev = std::make_shared<RecordingDevice>();
  EXPECT_EQ(bus.Insert(dev, 0x1000, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bus.Insert(dev, ~0ull - 3, 8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bus.Insert(nullptr, 0, 1).code(), absl::StatusCode::kInvalidArgument);
  // A range that ends exactly at the top of the address space is fine.
  EXPECT_TRUE(bus.Insert(dev, ~0ull - 7, 8).ok());
  std::array<uint8_t, 8> b{};
  EXPECT_TRUE(bus.Read(~0ull - 7, b));
  EXPECT_FALSE(bus.Read(~0ull - 3, b));
}

TEST(BusTest, RemoveFreesTheRange) {
  Bus bus("pio");
  auto dev = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Insert(dev, 0x60, 5).ok());
  EXPECT_EQ(bus.Remove(0x61).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(bus.Remove(0x60).ok());
  std::array<uint8_t, 1> b{};
  EXPECT_FALSE(bus.Read(0x60, b));
  EXPECT_TRUE(bus.Insert(dev, 0x60, 5).ok());
}

TEST(BusTest, ConcurrentLookupsFromManyThreads) {
  Bus bus("mmio");
  std::vector<std::shared_ptr<RecordingDevice>> devs;
  for (int i = 0; i < 64; ++i) {
    devs.push_back(std::make_shared<RecordingDevice>());
    ASSERT_TRUE(bus.Insert(devs.back(), 0x10000ull * i, 0x1000).ok());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&bus] {
      std::array<uint8_t, 4> b{};
      for (int i = 0; i < 10000; ++i) bus.Read(0x10000ull * (i % 64) + 4, b);
    });
  }
  for (auto& th : threads) th.join();
  int total = 0;
  for (auto& d : devs) total += d->reads;
  EXPECT_EQ(total, 40000);
}

}  // namespace
}  // namespace dsec::bus

namespace dsec::bus {
namespace {

TEST(BusClaimTest, RemovesItsRangeWhenDestroyed) {
  Bus bus("mmio");
  auto dev = std::make_shared<RecordingDevice>();
  {
    auto claim = BusClaim::Insert(&bus, dev, 0x1000, 0x10);
    ASSERT_TRUE(claim.ok()) << claim.status();
    EXPECT_EQ(bus.range_count(), 1u);
    BusClaim moved = std::move(*claim);
    EXPECT_EQ(bus.range_count(), 1u);
    EXPECT_EQ(BusClaim::Insert(&bus, dev, 0x1008, 0x10).status().code(),
              absl::StatusCode::kAlreadyExists);
  }
  EXPECT_EQ(bus.range_count(), 0u);
  EXPECT_FALSE(BusClaim::Insert(nullptr, dev, 0, 1).ok());
}

}  // namespace
}  // namespace dsec::bus

// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/node_capacity.h"

#include <sys/resource.h>

#include "gtest/gtest.h"

namespace dsec::daemon {
namespace {

// A host whose figures the test sets: fds and memory counted by the host,
// netns by the leases.
struct FakeHost {
  HostReadings h;
  int reads = 0;
  int64_t now = 0;
  FakeHost() {
    h[Resource::kFds] = {100, 200, "fake fds"};
    h[Resource::kMemory] = {1ll << 30, 4ll << 30, "fake memory"};
    h[Resource::kNetns] = {std::nullopt, 70, "fake netns"};
    h[Resource::kPids] = {std::nullopt, std::nullopt, "fake: the host does not say"};
  }
  CapacityOptions Options() {
    CapacityOptions o;
    o.read = [this] {
      ++reads;
      return h;
    };
    o.now_ms = [this] { return now; };
    o.reserve = {256ll << 20, 0, 50, 0, 0, 64, 0};
    return o;
  }
};

tier::Footprint Need(int64_t fds, int64_t netns = 0) {
  tier::Footprint f;
  f.fds = fds;
  f.netns = netns;
  f.pids = 1000000;  // the host does not count pids here: never checked
  return f;
}

TEST(NodeCapacity, RefusesTheCreateThatWouldPassTheLimitAndNamesTheResource) {
  FakeHost host;
  NodeCapacity cap(host.Options());
  // 100 used + 50 kept free of 200: 50 fds left, 20 per create.
  auto a = cap.Reserve(Need(20), "container");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = cap.Reserve(Need(20), "container");  // in flight: counted though not sampled yet
  ASSERT_TRUE(b.ok()) << b.status();
  auto c = cap.Reserve(Need(20), "container");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string m(c.status().message());
  EXPECT_NE(m.find("fds: 140 in use + 20 for this container sandbox > limit 200 - 50 kept free"),
            std::string::npos)
      << m;
  EXPECT_EQ(cap.refused()[static_cast<int>(Resource::kFds)], 1u);
  // A create that fails releases its reservation.
  b->Release();
  EXPECT_TRUE(cap.Reserve(Need(20), "container").ok());
}

TEST(NodeCapacity, CommittedSandboxesCountThroughTheHostOrTheirLeases) {
  FakeHost host;
  NodeCapacity cap(host.Options());
  auto a = cap.Reserve(Need(20, 3), "container");
  ASSERT_TRUE(a.ok());
  a->Commit();
  // Up: the host's fd count shows it; the netns count (not the host's)
  // is held by the lease: 3 of 70 - 64 kept.
  host.h[Resource::kFds].used = 120;
  host.now += 1000;
  EXPECT_EQ(cap.Reserve(Need(0, 4), "container").status().code(), absl::StatusCode::kResourceExhausted);
  auto b = cap.Reserve(Need(30, 3), "container");  // 120 + 30 = 150: fits exactly
  ASSERT_TRUE(b.ok()) << b.status();
  b->Release();
  a->Release();  // destroyed: the netns go back
  EXPECT_TRUE(cap.Reserve(Need(0, 6), "container").ok());
}

TEST(NodeCapacity, LeasesReleaseOnDestructionAndMoves) {
  FakeHost host;
  NodeCapacity cap(host.Options());
  {
    auto a = cap.Reserve(Need(0, 6), "container");
    ASSERT_TRUE(a.ok());
    CapacityLease moved = std::move(*a);
    moved.Commit();
    EXPECT_FALSE(cap.Reserve(Need(0, 1), "container").ok());
  }
  EXPECT_TRUE(cap.Reserve(Need(0, 6), "container").ok());
}

TEST(NodeCapacity, SamplesAtMostOncePerInterval) {
  FakeHost host;
  NodeCapacity cap(host.Options());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(cap.Reserve(Need(1), "container").ok());
  EXPECT_EQ(host.reads, 1);
  host.now += 500;
  ASSERT_TRUE(cap.Reserve(Need(1), "container").ok());
  EXPECT_EQ(host.reads, 2);
}

TEST(NodeCapacity, ALimitGivenLowersTheHostsAndMemoryIsBytes) {
  FakeHost host;
  CapacityOptions o = host.Options();
  o.limits[Resource::kFds] = 160;                     // 100 used + 50 kept: 10 left
  o.limits[Resource::kMemory] = (1ll << 30) + (300ll << 20);  // 300 MiB - 256 kept: 44 MiB left
  NodeCapacity cap(std::move(o));
  auto held = cap.Reserve(Need(10), "x");
  EXPECT_TRUE(held.ok());
  EXPECT_FALSE(cap.Reserve(Need(1), "x").ok());
  tier::Footprint big;
  big.memory_bytes = 45ll << 20;
  auto m = cap.Reserve(big, "microvm");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("memory: 1024 MiB in use + 45 MiB for this microvm sandbox > limit "
                                      "1324 MiB - 256 MiB kept free"),
            std::string::npos)
      << m.status();
}

TEST(NodeCapacity, HeadroomSaysWhatIsFreeAndWhatStopsEachTier) {
  FakeHost host;
  NodeCapacity cap(host.Options());
  nlohmann::json h = cap.Headroom({{"container", Need(10, 1)}, {"fncall", tier::Footprint{}}});
  EXPECT_EQ(h["resources"]["fds"]["free"], 50);
  EXPECT_EQ(h["resources"]["netns"]["used"], 0);
  EXPECT_EQ(h["resources"]["netns"]["free"], 6);
  EXPECT_EQ(h["resources"]["pids"]["checked"], false);
  EXPECT_EQ(h["sandboxes_more"]["container"]["sandboxes"], 5);
  EXPECT_EQ(h["sandboxes_more"]["container"]["limited_by"], "fds");
  EXPECT_TRUE(h["sandboxes_more"]["fncall"]["sandboxes"].is_null());
}

TEST(NodeCapacity, ReadsThisHost) {
  HostReadings h = ReadHost();
  const auto& fds = h[Resource::kFds];
  ASSERT_TRUE(fds.limit.has_value());
  struct rlimit rl {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  EXPECT_EQ(*fds.limit, static_cast<int64_t>(rl.rlim_cur));
  if (fds.used) {
    EXPECT_GE(*fds.used, 3);
    EXPECT_LE(*fds.used, *fds.limit);
  }
  ASSERT_TRUE(h[Resource::kMemory].used.has_value());
  EXPECT_GT(*h[Resource::kMemory].limit, *h[Resource::kMemory].used);
  ASSERT_TRUE(h[Resource::kMounts].used.has_value());
  EXPECT_GE(*h[Resource::kMounts].used, 1);
  ASSERT_TRUE(h[Resource::kPids].used.has_value());
  EXPECT_GE(*h[Resource::kPids].used, 1);
  EXPECT_FALSE(h[Resource::kNetns].used.has_value());
}

TEST(NodeCapacity, RaisingTheOpenFileLimitSaysWhatItDid) {
  struct rlimit before {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  const std::string said = RaiseOpenFileLimit();
  struct rlimit after {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(after.rlim_cur, after.rlim_max) << said;
  EXPECT_GE(after.rlim_max, before.rlim_max);
  EXPECT_NE(said.find("open-file limit"), std::string::npos) << said;
  EXPECT_NE(said.find(std::to_string(after.rlim_cur)), std::string::npos) << said;
}

TEST(NodeCapacity, ResourceNamesRoundTrip) {
  for (int i = 0; i < kResourceCount; ++i) {
    const Resource r = static_cast<Resource>(i);
    EXPECT_EQ(ResourceByName(ResourceName(r)), r);
  }
  EXPECT_FALSE(ResourceByName("sandboxes").has_value());
}

}  // namespace
}  // namespace dsec::daemon

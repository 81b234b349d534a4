// SPDX-License-Identifier: Apache-2.0
#include "sched/placement.h"

#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/status.h"
#include "sched/fake_sysfs.h"

namespace dsec::sched {
namespace {

using ::testing::ElementsAre;
using testing::FakeMachine;
using testing::TempDir;

Topology MakeTopology(const FakeMachine& m) {
  TempDir dir;
  testing::WriteFakeSysfs(dir.path(), m);
  auto t = Topology::Read(dir.path());
  DSEC_CHECK_OK(t.status());
  return *std::move(t);
}

std::unique_ptr<PlacementEngine> MakeEngine(Topology t, PlacementOptions o = {}) {
  auto e = PlacementEngine::Create(std::move(t), std::move(o));
  DSEC_CHECK_OK(e.status());
  return *std::move(e);
}

std::unique_ptr<PlacementEngine> MakeEngine(const FakeMachine& m, PlacementOptions o = {}) {
  auto e = PlacementEngine::Create(MakeTopology(m), std::move(o));
  DSEC_CHECK_OK(e.status());
  return *std::move(e);
}

const FakeMachine kTwoSocketSmt{.packages = 2, .cores_per_package = 4, .threads_per_core = 2,
                                .nodes = 2};

TEST(PlacementTest, LsGetsAllSiblingsOfAWholeCore) {
  auto engine = MakeEngine(kTwoSocketSmt);
  auto p = engine->Place({"a", QosClass::kLatencySensitive, 1});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->cpus, ElementsAre(0, 8));
  EXPECT_THAT(p->vcpu_cpus, ElementsAre(0));
  EXPECT_THAT(p->mems, ElementsAre(0));
}

TEST(PlacementTest, LsVcpusSpreadOverCoresBeforeSiblings) {
  auto engine = MakeEngine(kTwoSocketSmt);
  auto p = engine->Place({"a", QosClass::kLatencySensitive, 3});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->cpus, ElementsAre(0, 1, 8, 9));
  EXPECT_THAT(p->vcpu_cpus, ElementsAre(0, 1, 8));
}

TEST(PlacementTest, LsPrefersOneNumaNode) {
  auto engine = MakeEngine(kTwoSocketSmt);
  ASSERT_TRUE(engine->Place({"a", QosClass::kLatencySensitive, 6}).ok());
  // Node 0 has one free core left (2 CPUs); 4 CPUs fit only on node 1.
  auto p = engine->Place({"b", QosClass::kLatencySensitive, 4});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->cpus, ElementsAre(4, 5, 12, 13));
  EXPECT_THAT(p->mems, ElementsAre(1));
}

TEST(PlacementTest, RefusesLsBeyondFreeWholeCores) {
  auto engine = MakeEngine(FakeMachine{.cores_per_package = 2});
  ASSERT_TRUE(engine->Place({"a", QosClass::kLatencySensitive, 1}).ok());
  ASSERT_TRUE(engine->Place({"b", QosClass::kLatencySensitive, 1}).ok());
  auto p = engine->Place({"c", QosClass::kLatencySensitive, 1});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->metrics().ls_refused, 1u);
}

TEST(PlacementTest, LsNeverTakesACoreWithBeOnIt) {
  auto engine = MakeEngine(FakeMachine{.cores_per_package = 2, .threads_per_core = 2});
  auto be = engine->Place({"be", QosClass::kBestEffort, 1});
  ASSERT_TRUE(be.ok());
  auto ls = engine->Place({"ls", QosClass::kLatencySensitive, 2});
  ASSERT_TRUE(ls.ok()) << ls.status();
  for (int cpu : ls->cpus) EXPECT_NE(cpu % 2, be->cpus[0] % 2) << cpu;
  EXPECT_EQ(engine->Place({"ls2", QosClass::kLatencySensitive, 1}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(PlacementTest, BeFillsSiblingsOfItsCoreBeforeOpeningAnother) {
  auto engine = MakeEngine(FakeMachine{.cores_per_package = 4, .threads_per_core = 2});
  auto p = engine->Place({"be", QosClass::kBestEffort, 2});
  ASSERT_TRUE(p.ok());
  // Highest core (3: cpus 3 and 7) first, both of its siblings.
  EXPECT_THAT(p->cpus, ElementsAre(3, 7));
  EXPECT_EQ(engine->metrics().free_cores, 3u);
}

TEST(PlacementTest, BeOversubscribesUpToItsLimitThenRefuses) {
  auto engine = MakeEngine(FakeMachine{.cores_per_package = 2},
                           PlacementOptions{.be_vcpus_per_cpu = 2});
  ASSERT_TRUE(engine->Place({"ls", QosClass::kLatencySensitive, 1}).ok());
  ASSERT_TRUE(engine->Place({"be1", QosClass::kBestEffort, 1}).ok());
  auto be2 = engine->Place({"be2", QosClass::kBestEffort, 1});
  ASSERT_TRUE(be2.ok());
  EXPECT_THAT(be2->cpus, ElementsAre(1));
  EXPECT_EQ(engine->Place({"be3", QosClass::kBestEffort, 1}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(PlacementTest, ReservedAndIsolatedCpusAreNeverHandedOut) {
  auto engine = MakeEngine(FakeMachine{.cores_per_package = 4, .isolated = {3}},
                           PlacementOptions{.reserved_cpus = {0}});
  auto a = engine->Place({"a", QosClass::kLatencySensitive, 2});
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(a->cpus, ElementsAre(1, 2));
  EXPECT_EQ(engine->Place({"b", QosClass::kBestEffort, 1}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(PlacementTest, ReleaseRestoresCapacity) {
  auto engine = MakeEngine(FakeMachine{.cores_per_package = 2});
  ASSERT_TRUE(engine->Place({"a", QosClass::kLatencySensitive, 2}).ok());
  EXPECT_FALSE(engine->Place({"b", QosClass::kLatencySensitive, 1}).ok());
  ASSERT_TRUE(engine->Release("a").ok());
  EXPECT_TRUE(engine->Place({"b", QosClass::kLatencySensitive, 2}).ok());
  EXPECT_EQ(engine->Release("nope").code(), absl::StatusCode::kNotFound);
}

TEST(PlacementTest, RejectsBadAndDuplicateRequests) {
  auto engine = MakeEngine(FakeMachine{.cores_per_package = 2});
  EXPECT_EQ(engine->Place({"a", QosClass::kBestEffort, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine->Place({"a", QosClass::kBestEffort, 1}).ok());
  EXPECT_EQ(engine->Place({"a", QosClass::kBestEffort, 1}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(PlacementTest, ParsesQosClassNames) {
  EXPECT_EQ(*ParseQosClass("ls"), QosClass::kLatencySensitive);
  EXPECT_EQ(*ParseQosClass("be"), QosClass::kBestEffort);
  EXPECT_EQ(ParseQosClass("gold").status().code(), absl::StatusCode::kInvalidArgument);
}

// Checks every invariant of the live placements against the topology.
void CheckInvariants(const PlacementEngine& engine, int be_limit) {
  const Topology& t = engine.topology();
  std::map<int, std::string> ls_owner;
  std::map<int, int> be_load;
  for (const Placement& p : engine.Placements()) {
    ASSERT_FALSE(p.cpus.empty());
    for (int cpu : p.vcpu_cpus) {
      ASSERT_TRUE(std::binary_search(p.cpus.begin(), p.cpus.end(), cpu));
    }
    if (p.qos == QosClass::kLatencySensitive) {
      for (int cpu : p.cpus) {
        // An LS core is never shared with another sandbox.
        ASSERT_TRUE(ls_owner.emplace(cpu, p.sandbox).second) << "cpu" << cpu << " shared";
        // ... and LS holds every sibling of it.
        for (int sib : t.cores()[static_cast<size_t>(t.Find(cpu)->core)].cpus) {
          ASSERT_TRUE(std::binary_search(p.cpus.begin(), p.cpus.end(), sib));
        }
      }
    } else {
      for (int cpu : p.vcpu_cpus) ++be_load[cpu];
    }
  }
  for (const auto& [cpu, load] : be_load) {
    ASSERT_LE(load, be_limit);
    // BE is never on an LS core (and so never on a sibling of one).
    for (int sib : t.cores()[static_cast<size_t>(t.Find(cpu)->core)].cpus) {
      ASSERT_EQ(ls_owner.count(sib), 0u) << "BE on cpu" << cpu << " next to LS";
    }
  }
}

TEST(PlacementTest, InvariantsHoldOverRandomRequestSequences) {
  const FakeMachine shapes[] = {
      FakeMachine{.cores_per_package = 2},
      kTwoSocketSmt,
      FakeMachine{.packages = 1, .cores_per_package = 6, .threads_per_core = 2,
                  .offline = {3, 10}},
      FakeMachine{.packages = 4, .cores_per_package = 2, .threads_per_core = 4, .nodes = 2},
  };
  for (const FakeMachine& shape : shapes) {
    const Topology topology = MakeTopology(shape);
    for (uint32_t seed = 1; seed <= 40; ++seed) {
      const int limit = 1 + static_cast<int>(seed % 3);
      auto engine = MakeEngine(topology, PlacementOptions{.be_vcpus_per_cpu = limit});
      const int cpus = static_cast<int>(engine->topology().online_cpus().size());
      std::mt19937 rng(seed);
      std::vector<std::string> live;
      for (int step = 0; step < 200; ++step) {
        if (!live.empty() && rng() % 3 == 0) {
          size_t i = rng() % live.size();
          ASSERT_TRUE(engine->Release(live[i]).ok());
          live.erase(live.begin() + static_cast<long>(i));
        } else {
          PlacementRequest r{absl::StrCat("s", step),
                             rng() % 2 ? QosClass::kLatencySensitive : QosClass::kBestEffort,
                             1 + static_cast<int>(rng() % 4)};
          const PlacementMetrics before = engine->metrics();
          auto p = engine->Place(r);
          if (p.ok()) {
            live.push_back(r.sandbox);
            ASSERT_EQ(p->vcpu_cpus.size(), static_cast<size_t>(r.vcpus));
          } else {
            ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
            // Refused LS requests really did not fit in free whole cores.
            if (r.qos == QosClass::kLatencySensitive) {
              size_t free_cpus = 0;
              for (const PhysicalCore& c : engine->topology().cores()) {
                bool used = false;
                for (const Placement& q : engine->Placements()) {
                  for (int cpu : c.cpus) {
                    used |= std::binary_search(q.cpus.begin(), q.cpus.end(), cpu);
                  }
                }
                if (!used) free_cpus += c.cpus.size();
              }
              ASSERT_LT(free_cpus, static_cast<size_t>(r.vcpus));
            }
            ASSERT_EQ(engine->metrics().free_cores, before.free_cores);
          }
          // A request larger than the machine can never succeed.
          if (r.qos == QosClass::kLatencySensitive && r.vcpus > cpus) {
            ASSERT_FALSE(p.ok());
          }
        }
        ASSERT_NO_FATAL_FAILURE(CheckInvariants(*engine, limit));
      }
      // Releasing everything restores the whole machine.
      for (const std::string& id : live) ASSERT_TRUE(engine->Release(id).ok());
      EXPECT_EQ(engine->metrics().free_cores, engine->topology().cores().size());
      EXPECT_TRUE(engine->Place({"all", QosClass::kLatencySensitive, cpus}).ok());
    }
  }
}

TEST(PlacementTest, ConcurrentPlacementsKeepInvariants) {
  auto engine = MakeEngine(kTwoSocketSmt, PlacementOptions{.be_vcpus_per_cpu = 2});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        std::string id = absl::StrCat("t", t, "-", i);
        auto p = engine->Place({id, i % 2 ? QosClass::kLatencySensitive : QosClass::kBestEffort,
                                1 + i % 3});
        if (p.ok() && i % 4 == 0) DSEC_CHECK_OK(engine->Release(id));
      }
    });
  }
  for (auto& th : threads) th.join();
  CheckInvariants(*engine, 2);
}

TEST(PlacementTest, SameRequestSequenceGivesSamePlacements) {
  auto a = MakeEngine(kTwoSocketSmt);
  auto b = MakeEngine(kTwoSocketSmt);
  for (int i = 0; i < 12; ++i) {
    PlacementRequest r{absl::StrCat("s", i),
                       i % 3 ? QosClass::kBestEffort : QosClass::kLatencySensitive, 1 + i % 2};
    auto pa = a->Place(r);
    auto pb = b->Place(r);
    ASSERT_EQ(pa.ok(), pb.ok());
    if (pa.ok()) {
      EXPECT_EQ(pa->vcpu_cpus, pb->vcpu_cpus);
    }
  }
}

}  // namespace
}  // namespace dsec::sched

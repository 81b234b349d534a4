// SPDX-License-Identifier: Apache-2.0
#include "sched/topology.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sched/fake_sysfs.h"

namespace dsec::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::FakeMachine;
using testing::TempDir;
using testing::WriteFakeSysfs;
using testing::WriteFile;

TEST(TopologyTest, ReadsOneSocketWithoutSmt) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.packages = 1, .cores_per_package = 2});
  auto t = Topology::Read(dir.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->online_cpus(), ElementsAre(0, 1));
  ASSERT_EQ(t->cores().size(), 2u);
  EXPECT_THAT(t->cores()[0].cpus, ElementsAre(0));
  EXPECT_THAT(t->cores()[1].cpus, ElementsAre(1));
  EXPECT_FALSE(t->smt());
  EXPECT_THAT(t->isolated_cpus(), IsEmpty());
  EXPECT_EQ(t->Describe(), "cpus=0-1 cores=2 packages=1 nodes=1 smt=no isolated=");
}

TEST(TopologyTest, ReadsTwoSocketsWithSmt2AndNuma) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.packages = 2, .cores_per_package = 4,
                                         .threads_per_core = 2, .nodes = 2});
  auto t = Topology::Read(dir.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->online_cpus().size(), 16u);
  ASSERT_EQ(t->cores().size(), 8u);
  EXPECT_TRUE(t->smt());
  // x86 numbering: cpu N and N+8 are siblings.
  EXPECT_THAT(t->cores()[0].cpus, ElementsAre(0, 8));
  EXPECT_THAT(t->cores()[5].cpus, ElementsAre(5, 13));
  EXPECT_EQ(t->cores()[5].package_id, 1);
  EXPECT_EQ(t->cores()[5].core_id, 1);
  EXPECT_EQ(t->cores()[5].node, 1);
  EXPECT_THAT(t->nodes().at(0), ElementsAre(0, 1, 2, 3, 8, 9, 10, 11));
  EXPECT_THAT(t->memory_nodes(), ElementsAre(0, 1));
  EXPECT_EQ(t->Find(13)->core, 5);
  EXPECT_EQ(t->Find(13)->node, 1);
  EXPECT_EQ(t->Find(99), nullptr);
}

TEST(TopologyTest, OfflineCpusAreLeftOutOfCoresAndNodes) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.packages = 1, .cores_per_package = 4,
                                         .threads_per_core = 2, .offline = {5, 6}});
  auto t = Topology::Read(dir.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->online_cpus(), ElementsAre(0, 1, 2, 3, 4, 7));
  ASSERT_EQ(t->cores().size(), 4u);
  EXPECT_THAT(t->cores()[1].cpus, ElementsAre(1));  // sibling 5 is offline
  EXPECT_THAT(t->cores()[3].cpus, ElementsAre(3, 7));
  EXPECT_THAT(t->nodes().at(0), ElementsAre(0, 1, 2, 3, 4, 7));
}

TEST(TopologyTest, KernelWithoutNumaHasOneNode) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.cores_per_package = 2, .numa_dir = false});
  auto t = Topology::Read(dir.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->nodes().at(0), ElementsAre(0, 1));
  EXPECT_THAT(t->memory_nodes(), ElementsAre(0));
}

TEST(TopologyTest, ReadsIsolatedCpus) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.cores_per_package = 4, .isolated = {2, 3}});
  auto t = Topology::Read(dir.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->isolated_cpus(), ElementsAre(2, 3));
}

TEST(TopologyTest, MissingOnlineFileNamesIt) {
  TempDir dir;
  auto t = Topology::Read(dir.path());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("sys/devices/system/cpu/online"));
}

TEST(TopologyTest, MalformedOnlineFileNamesIt) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{});
  WriteFile(dir.path(), "sys/devices/system/cpu/online", "0-x\n");
  auto t = Topology::Read(dir.path());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("cpu/online"));
}

TEST(TopologyTest, MissingTopologyFileOfOnlineCpuNamesIt) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.cores_per_package = 2});
  ::unlink((dir.path() + "/sys/devices/system/cpu/cpu1/topology/core_id").c_str());
  auto t = Topology::Read(dir.path());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("cpu1/topology/core_id"));
}

TEST(TopologyTest, NonNumericCoreIdNamesTheFile) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.cores_per_package = 2});
  WriteFile(dir.path(), "sys/devices/system/cpu/cpu0/topology/physical_package_id", "zero\n");
  auto t = Topology::Read(dir.path());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("cpu0/topology/physical_package_id"));
}

TEST(TopologyTest, RejectsSiblingListsThatDisagree) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.cores_per_package = 2, .threads_per_core = 2});
  // cpu0 claims cpu1 as a sibling; cpu1 claims cpu3.
  WriteFile(dir.path(), "sys/devices/system/cpu/cpu0/topology/thread_siblings_list", "0-1\n");
  auto t = Topology::Read(dir.path());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("thread_siblings_list"));
}

TEST(TopologyTest, RejectsSiblingListWithoutTheCpuItself) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.cores_per_package = 2});
  WriteFile(dir.path(), "sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "0\n");
  auto t = Topology::Read(dir.path());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("cpu1/topology/thread_siblings_list"));
}

TEST(TopologyTest, RejectsOnlineCpuInNoNode) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.cores_per_package = 2});
  WriteFile(dir.path(), "sys/devices/system/node/node0/cpulist", "0\n");
  auto t = Topology::Read(dir.path());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("cpu1 is in no node"));
}

TEST(TopologyTest, MissingNodeCpulistNamesIt) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), FakeMachine{.packages = 2, .nodes = 2});
  ::unlink((dir.path() + "/sys/devices/system/node/node1/cpulist").c_str());
  auto t = Topology::Read(dir.path());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("node1/cpulist"));
}

TEST(TopologyTest, ReadsThisHost) {
  auto t = Topology::Read("/");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->online_cpus().empty());
  EXPECT_FALSE(t->cores().empty());
}

}  // namespace
}  // namespace dsec::sched

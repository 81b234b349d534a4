// SPDX-License-Identifier: Apache-2.0
// The DAMON driver against a fake sysfs tree (plain files in a temp dir).
// Directories the kernel would create when a count is raised (a new
// kdamond's skeleton) are laid out in advance; the driver only sees them once
// the count covers them, as with the real interface.
#include "balloon/damon_sysfs.h"

#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "balloon/fake_host_memory.h"
#include "balloon/reclaim_controller.h"
#include "gtest/gtest.h"

namespace dsec::balloon {
namespace {

class FakeDamonTree {
 public:
  FakeDamonTree() {
    char tmpl[] = "/tmp/dsec-damon-test-XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  ~FakeDamonTree() {
    ::nftw(
        root_.c_str(),
        [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  std::string admin() const { return root_ + "/admin"; }

  void Write(const std::string& rel, const std::string& text) {
    const std::string path = admin() + "/" + rel;
    for (size_t pos = root_.size() + 1; (pos = path.find('/', pos)) != std::string::npos; ++pos) {
      ::mkdir(path.substr(0, pos).c_str(), 0755);
    }
    std::ofstream(path) << text;
  }
  std::string Read(const std::string& rel) const {
    std::ifstream in(admin() + "/" + rel);
    std::stringstream s;
    s << in.rdbuf();
    std::string v = s.str();
    while (!v.empty() && v.back() == '\n') v.pop_back();
    return v;
  }
  // A kdamond directory as the kernel creates it, in `state` with
  // `contexts` contexts, and (for the one the driver will create) the
  // context skeleton with room for two regions.
  void Kdamond(int i, const std::string& state, int contexts, const std::string& ops = "vaddr\nfvaddr\npaddr") {
    const std::string k = absl::StrCat("kdamonds/", i, "/");
    Write(k + "state", state + "\n");
    Write(k + "pid", "-1\n");
    Write(k + "contexts/nr_contexts", absl::StrCat(contexts, "\n"));
    const std::string c = k + "contexts/0/";
    Write(c + "avail_operations", ops + "\n");
    Write(c + "operations", "paddr\n");
    for (const char* f : {"sample_us", "aggr_us", "update_us"})
      Write(c + "monitoring_attrs/intervals/" + f, "0\n");
    for (const char* f : {"min", "max"}) Write(c + "monitoring_attrs/nr_regions/" + f, "0\n");
    Write(c + "targets/nr_targets", "0\n");
    Write(c + "targets/0/pid_target", "0\n");
    Write(c + "targets/0/regions/nr_regions", "0\n");
    for (int r = 0; r < 2; ++r) {
      Write(absl::StrCat(c, "targets/0/regions/", r, "/start"), "0\n");
      Write(absl::StrCat(c, "targets/0/regions/", r, "/end"), "0\n");
    }
    Write(c + "schemes/nr_schemes", "0\n");
    Write(c + "schemes/0/action", "pageout\n");
    for (const char* a : {"sz", "nr_accesses", "age"})
      for (const char* m : {"min", "max"})
        Write(absl::StrCat(c, "schemes/0/access_pattern/", a, "/", m), "0\n");
    Write(c + "schemes/0/tried_regions/total_bytes", "0\n");
  }
  void TriedRegion(int k, int r, uint64_t start, uint64_t end, int accesses, int age) {
    const std::string d = absl::StrCat("kdamonds/", k, "/contexts/0/schemes/0/tried_regions/", r, "/");
    Write(d + "start", absl::StrCat(start, "\n"));
    Write(d + "end", absl::StrCat(end, "\n"));
    Write(d + "nr_accesses", absl::StrCat(accesses, "\n"));
    Write(d + "age", absl::StrCat(age, "\n"));
  }
  // Every file of kdamond i, for "left alone" checks.
  std::string Snapshot(int i) const {
    std::string out;
    for (const char* f : {"state", "pid", "contexts/nr_contexts", "contexts/0/operations",
                          "contexts/0/targets/nr_targets", "contexts/0/schemes/0/action"}) {
      out += Read(absl::StrCat("kdamonds/", i, "/", f)) + "|";
    }
    return out;
  }

 private:
  std::string root_;
};

DamonOptions Options(const FakeDamonTree& tree) {
  DamonOptions o;
  o.root = tree.admin();
  o.aggr_us = 100'000;
  o.cold_after_us = 1'000'000;  // 10 aggregation intervals
  return o;
}

TEST(DamonSysfsTest, BusySlotIsLeftAloneAndReportsUnavailable) {
  FakeDamonTree tree;
  tree.Write("kdamonds/nr_kdamonds", "1\n");
  tree.Kdamond(0, "on", 1, "paddr");  // the platform's kdamond, running
  tree.Kdamond(1, "off", 0);          // what raising the count would create
  const std::string before = tree.Snapshot(0);
  auto source = DamonSysfsSource::Create(Options(tree));
  ASSERT_EQ(source.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(source.status().message().find("running"), std::string::npos);
  EXPECT_EQ(tree.Read("kdamonds/nr_kdamonds"), "1");
  EXPECT_EQ(tree.Snapshot(0), before);
}

TEST(DamonSysfsTest, StoppedKdamondOfSomeoneElseIsNotWiped) {
  FakeDamonTree tree;
  tree.Write("kdamonds/nr_kdamonds", "1\n");
  tree.Kdamond(0, "off", 1);  // stopped but configured: raising the count would wipe it
  const std::string before = tree.Snapshot(0);
  auto source = DamonSysfsSource::Create(Options(tree));
  EXPECT_EQ(source.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(tree.Read("kdamonds/nr_kdamonds"), "1");
  EXPECT_EQ(tree.Snapshot(0), before);
}

TEST(DamonSysfsTest, MissingDamonIsUnavailable) {
  FakeDamonTree tree;
  EXPECT_EQ(DamonSysfsSource::Create(Options(tree)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(DamonSysfsTest, KernelWithoutVaddrGivesTheSlotBack) {
  FakeDamonTree tree;
  tree.Write("kdamonds/nr_kdamonds", "0\n");
  tree.Kdamond(0, "off", 0, "paddr");
  auto source = DamonSysfsSource::Create(Options(tree));
  EXPECT_EQ(source.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(tree.Read("kdamonds/nr_kdamonds"), "0");
  EXPECT_EQ(tree.Read("kdamonds/0/contexts/nr_contexts"), "0");
}

TEST(DamonSysfsTest, CreatesOwnKdamondMonitorsAndTearsDownOnlyIt) {
  FakeDamonTree tree;
  tree.Write("kdamonds/nr_kdamonds", "1\n");
  tree.Kdamond(0, "off", 0);  // an empty slot someone else made: never used
  tree.Kdamond(1, "off", 0);
  const std::string other = tree.Snapshot(0);
  {
    auto source = DamonSysfsSource::Create(Options(tree));
    ASSERT_TRUE(source.ok()) << source.status();
    EXPECT_EQ((*source)->kdamond_index(), 1);
    EXPECT_EQ(tree.Read("kdamonds/nr_kdamonds"), "2");
    const HostRange ram[] = {{0x7f0000000000, 0x400000}};
    ASSERT_TRUE((*source)->Track(1, 4242, ram).ok());
    const std::string c = "kdamonds/1/contexts/0/";
    EXPECT_EQ(tree.Read("kdamonds/1/state"), "on");
    EXPECT_EQ(tree.Read(c + "operations"), "vaddr");
    EXPECT_EQ(tree.Read(c + "targets/nr_targets"), "1");
    EXPECT_EQ(tree.Read(c + "targets/0/pid_target"), "4242");
    EXPECT_EQ(tree.Read(c + "targets/0/regions/0/start"), absl::StrCat(0x7f0000000000ull));
    EXPECT_EQ(tree.Read(c + "targets/0/regions/0/end"), absl::StrCat(0x7f0000400000ull));
    EXPECT_EQ(tree.Read(c + "schemes/0/action"), "stat");
    // A second process cannot share the context (regions matched by address).
    EXPECT_EQ((*source)->Track(2, 4343, ram).code(), absl::StatusCode::kFailedPrecondition);

    // The kernel's answer to update_schemes_tried_regions.
    tree.TriedRegion(1, 0, 0x7f0000000000, 0x7f0000100000, 5, 2);   // hot
    tree.TriedRegion(1, 1, 0x7f0000100000, 0x7f0000300000, 0, 50);  // cold for 5 s
    tree.TriedRegion(1, 2, 0x7f0000300000, 0x7f0000500000, 0, 3);   // idle, not long enough
    auto sample = (*source)->Sample(1);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(tree.Read("kdamonds/1/state"), "update_schemes_tried_regions");
    EXPECT_EQ(sample->tracked_bytes, 0x400000u);
    EXPECT_EQ(sample->hot_bytes, 0x100000u);
    ASSERT_EQ(sample->cold.size(), 1u);
    EXPECT_EQ(sample->cold[0].range.addr, 0x7f0000100000u);
    EXPECT_EQ(sample->cold[0].range.size, 0x200000u);
    EXPECT_EQ(tree.Snapshot(0), other);
  }
  // Torn down: stopped, context removed, slot given back; kdamond 0 untouched.
  EXPECT_EQ(tree.Read("kdamonds/1/state"), "off");
  EXPECT_EQ(tree.Read("kdamonds/1/contexts/nr_contexts"), "0");
  EXPECT_EQ(tree.Read("kdamonds/nr_kdamonds"), "1");
  EXPECT_EQ(tree.Snapshot(0), other);
}

TEST(DamonSysfsTest, BusyHostFallsBackToPagemapSampler) {
  FakeDamonTree tree;
  tree.Write("kdamonds/nr_kdamonds", "1\n");
  tree.Kdamond(0, "on", 1, "paddr");
  FakeHostMemory mem;
  std::string why;
  auto source = CreateWorkingSetSource(&mem, Options(tree), {}, &why);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->name(), "pagemap-sampler");
  EXPECT_NE(why.find("kdamond 0 is running"), std::string::npos);
}

}  // namespace
}  // namespace dsec::balloon

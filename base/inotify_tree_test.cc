// SPDX-License-Identifier: Apache-2.0
// InotifyDirWatch over a plain directory tree (the tiers' walls are tested
// with them: sandbox/daemon's daemon_watch_test, the guest agent's
// server_test).
#include "base/inotify_tree.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dsec {
namespace {

using Type = FileEvent::Type;

// A tree rooted at a host directory; directories named "hidden" are not
// served, and OpenDir of one that is not there says so.
class HostTree final : public WatchedTree {
 public:
  explicit HostTree(std::string root, int* walks = nullptr) : root_(std::move(root)), walks_(walks) {}
  absl::StatusOr<std::unique_ptr<Walk>> BeginWalk() override {
    if (walks_ != nullptr) ++*walks_;
    return std::make_unique<HostWalk>(root_);
  }

 private:
  struct HostWalk final : Walk {
    explicit HostWalk(std::string r) : root(std::move(r)) {}
    absl::StatusOr<ScopedFd> OpenDir(const std::string& path) override {
      ScopedFd fd(::open((root + path).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!fd.valid()) return absl::NotFoundError(absl::StrCat("no such directory: ", path));
      return fd;
    }
    bool Serves(int /*fd*/, const std::string& path) override {
      return path.size() < 7 || path.compare(path.size() - 7, 7, "/hidden") != 0;
    }
    std::string root;
  };
  const std::string root_;
  int* const walks_;
};

class InotifyTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsec-inotify-tree-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void Mkdir(const std::string& rel) { ASSERT_EQ(::mkdir((dir_ + "/" + rel).c_str(), 0755), 0) << rel; }
  void Touch(const std::string& rel) {
    const int fd = ::open((dir_ + "/" + rel).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << rel;
    ::close(fd);
  }
  void Rename(const std::string& from, const std::string& to) {
    ASSERT_EQ(::rename((dir_ + "/" + from).c_str(), (dir_ + "/" + to).c_str()), 0) << from;
  }

  std::unique_ptr<InotifyDirWatch> Watch(const std::string& path, bool recursive, size_t max_dirs = 64) {
    auto w = InotifyDirWatch::Create(std::make_unique<HostTree>(dir_), path, recursive, max_dirs);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(*w) : nullptr;
  }

  // Events until `want` (name, type) came, or 5 s.
  static std::vector<FileEvent> Until(InotifyDirWatch& w, const std::string& name, Type type) {
    std::vector<FileEvent> all;
    for (int i = 0; i < 50; ++i) {
      auto got = w.Next(100);
      if (!got.ok()) break;
      all.insert(all.end(), got->begin(), got->end());
      for (const FileEvent& e : all) {
        if (e.name == name && e.type == type) return all;
      }
    }
    ADD_FAILURE() << "no event " << name;
    return all;
  }
  static bool Has(const std::vector<FileEvent>& evs, const std::string& name, Type type) {
    return std::any_of(evs.begin(), evs.end(), [&](const FileEvent& e) { return e.name == name && e.type == type; });
  }

  std::string dir_;
};

TEST_F(InotifyTreeTest, FollowsNewAndRenamedDirectoriesAndDropsMovedOutOnes) {
  Mkdir("w");
  Mkdir("w/a");
  Mkdir("w/hidden");
  Mkdir("out");
  auto w = Watch("/w", /*recursive=*/true);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->watched_dirs(), 2u);  // w and w/a; the tree does not serve w/hidden
  Touch("w/a/f");
  auto evs = Until(*w, "a/f", Type::kCreate);
  Mkdir("w/a/new");
  Until(*w, "a/new", Type::kCreate);
  Touch("w/a/new/g");
  Until(*w, "a/new/g", Type::kCreate);
  // Renamed inside the tree: its watch names it anew.
  Rename("w/a/new", "w/moved");
  evs = Until(*w, "moved", Type::kCreate);
  EXPECT_TRUE(Has(evs, "a/new", Type::kRename));
  Touch("w/moved/h");
  Until(*w, "moved/h", Type::kCreate);
  // Moved out: dropped; what happens there is not reported.
  Rename("w/moved", "out/gone");
  Until(*w, "moved", Type::kRename);
  EXPECT_EQ(w->watched_dirs(), 2u);
  Touch("out/gone/i");
  Touch("w/hidden/j");
  Touch("w/k");
  evs = Until(*w, "k", Type::kCreate);
  for (const FileEvent& e : evs) {
    EXPECT_EQ(e.name.find("gone"), std::string::npos) << e.name;
    EXPECT_EQ(e.name.find("hidden/"), std::string::npos) << e.name;
  }
}

TEST_F(InotifyTreeTest, WhatANewDirectoryHoldsBeforeItsWatchIsReportedAsCreated) {
  Mkdir("w");
  Mkdir("out");
  Mkdir("out/d");
  Mkdir("out/d/e");
  Touch("out/d/f");
  Touch("out/d/e/g");
  auto w = Watch("/w", /*recursive=*/true);
  ASSERT_NE(w, nullptr);
  // Moved in with its contents (as a directory made and filled before its
  // watch was added would be): none of them has an event of its own.
  Rename("out/d", "w/d");
  auto evs = Until(*w, "d/e/g", Type::kCreate);
  EXPECT_TRUE(Has(evs, "d", Type::kCreate));
  EXPECT_TRUE(Has(evs, "d/f", Type::kCreate));
  EXPECT_TRUE(Has(evs, "d/e", Type::kCreate));
  EXPECT_EQ(w->watched_dirs(), 3u);
  Touch("w/d/e/h");
  Until(*w, "d/e/h", Type::kCreate);
}

TEST_F(InotifyTreeTest, OneLevelWithoutRecursionAndLinksNotFollowed) {
  Mkdir("w");
  Mkdir("w/sub");
  Mkdir("elsewhere");
  ASSERT_EQ(::symlink("../elsewhere", (dir_ + "/w/link").c_str()), 0);
  auto flat = Watch("/w", /*recursive=*/false);
  ASSERT_NE(flat, nullptr);
  EXPECT_EQ(flat->watched_dirs(), 1u);
  auto deep = Watch("/w", /*recursive=*/true);
  ASSERT_NE(deep, nullptr);
  EXPECT_EQ(deep->watched_dirs(), 2u);  // w and w/sub, not the link's target
  Touch("w/sub/f");
  Touch("elsewhere/x");
  Touch("w/top");
  auto evs = Until(*deep, "top", Type::kCreate);
  EXPECT_TRUE(Has(evs, "sub/f", Type::kCreate));
  EXPECT_FALSE(Has(evs, "link/x", Type::kCreate));
  evs = Until(*flat, "top", Type::kCreate);
  EXPECT_FALSE(Has(evs, "sub/f", Type::kCreate));
}

TEST_F(InotifyTreeTest, TypesOfChange) {
  Mkdir("w");
  Touch("w/f");
  auto w = Watch("/w", false);
  ASSERT_NE(w, nullptr);
  const int fd = ::open((dir_ + "/w/f").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "x", 1), 1);
  ::close(fd);
  Until(*w, "f", Type::kWrite);
  ASSERT_EQ(::chmod((dir_ + "/w/f").c_str(), 0600), 0);
  Until(*w, "f", Type::kChmod);
  ASSERT_EQ(::unlink((dir_ + "/w/f").c_str()), 0);
  Until(*w, "f", Type::kRemove);
}

TEST_F(InotifyTreeTest, BoundedDirectoriesAndErrorsEndTheWatch) {
  Mkdir("w");
  for (int i = 0; i < 3; ++i) Mkdir(absl::StrCat("w/d", i));
  auto over = InotifyDirWatch::Create(std::make_unique<HostTree>(dir_), "/w", true, 3);
  ASSERT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  EXPECT_NE(over.status().message().find("more than 3 directories under /w"), std::string::npos);
  auto missing = InotifyDirWatch::Create(std::make_unique<HostTree>(dir_), "/nope", true, 3);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();

  // Growing past the bound while watching ends the watch with that error.
  auto w = Watch("/w", true, 5);
  ASSERT_NE(w, nullptr);
  Mkdir("w/d3");
  Mkdir("w/d4");
  absl::Status end;
  for (int i = 0; i < 50 && end.ok(); ++i) end = w->Next(100).status();
  EXPECT_TRUE(absl::IsResourceExhausted(end)) << end;
  EXPECT_TRUE(absl::IsResourceExhausted(w->Next(0).status()));  // and stays so

  // The watched directory removed: NotFound.
  Mkdir("v");
  auto v = Watch("/v", false);
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(::rmdir((dir_ + "/v").c_str()), 0);
  end = absl::OkStatus();
  for (int i = 0; i < 50 && end.ok(); ++i) end = v->Next(100).status();
  EXPECT_TRUE(absl::IsNotFound(end)) << end;
}

TEST_F(InotifyTreeTest, CloseWakesAWaitingNextAndItsFdPolls) {
  Mkdir("w");
  auto w = Watch("/w", false);
  ASSERT_NE(w, nullptr);
  EXPECT_GE(w->fd(), 0);
  auto quiet = w->Next(0);
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->empty());
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    w->Close();
  });
  auto closed = w->Next(10'000);
  closer.join();
  EXPECT_TRUE(absl::IsUnavailable(closed.status())) << closed.status();
}

}  // namespace
}  // namespace dsec

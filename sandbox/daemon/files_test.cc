// SPDX-License-Identifier: Apache-2.0
// The files API against a sandbox that plants links, FIFOs and devices
// (issue 23, case 1), in the container tier's default mode and with
// user_namespace. Canaries only: the kernel interfaces named here are read
// or written with values that change nothing (a mode equal to the current
// one, a timer slack of a sandbox process, read-only sysfs), and each test
// says what today's daemon did with them.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;

constexpr char kJson[] = "application/json";
constexpr char kOctets[] = "application/octet-stream";

class DaemonFilesTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    auto dir = TempDir::Create("dsec-daemon-files-");
    ASSERT_TRUE(dir.ok());
    dir_ = new TempDir(std::move(*dir));
    absl::Status s = testing::BuildBusyboxLayer(dir_->path() + "/store", dir_->path());
    if (!s.ok()) skip_ = absl::StrCat("busybox layer: ", s.ToString());
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    static int n = 0;
    auto d = testing::LocalDaemon::Start(absl::StrCat(dir_->path(), "/run", n++), dir_->path() + "/store", {});
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = testing::UnixClient(daemon_->socket());
    // A request that blocks the daemon fails the test instead of hanging it.
    client_->set_read_timeout(20, 0);
    auto r = client_->Post("/v1/sandboxes", json{{"tier", "container"}, {"user_namespace", GetParam()}}.dump(),
                           kJson);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
    id_ = testing::JsonOf(r)["id"];
  }
  void TearDown() override {
    if (client_ && !id_.empty()) client_->Delete(absl::StrCat("/v1/sandboxes/", id_));
    client_.reset();
    daemon_.reset();
  }

  json Sh(const std::string& script) {
    auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id_, "/exec"),
                           json{{"argv", {"sh", "-c", script}}}.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << r->body;
    return testing::JsonOf(r);
  }
  httplib::Result Get(const std::string& path) {
    return client_->Get(absl::StrCat("/v1/sandboxes/", id_, "/files?path=", path));
  }
  httplib::Result Put(const std::string& path, const std::string& data, const std::string& mode = "") {
    return client_->Put(absl::StrCat("/v1/sandboxes/", id_, "/files?path=", path,
                                     mode.empty() ? "" : "&mode=", mode),
                        data, kOctets);
  }
  // The API refused the path itself: 400 naming it.
  static void ExpectRefused(const httplib::Result& r, const std::string& what) {
    ASSERT_TRUE(r) << what << ": no answer (" << httplib::to_string(r.error()) << ")";
    EXPECT_EQ(r->status, 400) << what << ": " << r->body.substr(0, 300);
    json e = testing::JsonOf(r)["error"];
    EXPECT_EQ(e["code"], "INVALID_ARGUMENT") << what;
    EXPECT_EQ(e["field"], "path") << what;
  }

  static TempDir* dir_;
  static std::string skip_;
  std::unique_ptr<testing::LocalDaemon> daemon_;
  std::unique_ptr<httplib::Client> client_;
  std::string id_;
};
TempDir* DaemonFilesTest::dir_ = nullptr;
std::string DaemonFilesTest::skip_;

// Today's daemon read both through the links with its own capabilities:
// /proc/iomem with the host's physical addresses (CAP_SYS_ADMIN), the
// sandbox init's kernel stack (CAP_SYS_ADMIN and CAP_SYS_PTRACE), and it
// listed the sandbox's /proc.
TEST_P(DaemonFilesTest, ProcFilesAreNotReadThroughLinksOrDirectly) {
  Sh("mkdir -p /work && ln -s /proc/iomem /work/iomem && ln -s /proc/1/stack /work/stack && "
     "ln -s ../../proc/1/environ /work/env");
  for (const std::string p : {"/work/iomem", "/work/stack", "/work/env", "/proc/iomem", "/proc/1/stack",
                              "/sys/kernel/mm/transparent_hugepage/enabled"}) {
    ExpectRefused(Get(p), p);
  }
  ExpectRefused(client_->Get(absl::StrCat("/v1/sandboxes/", id_, "/files/list?path=/proc/1")), "list /proc/1");
  ExpectRefused(client_->Get(absl::StrCat("/v1/sandboxes/", id_, "/files/list?path=/sys")), "list /sys");
  // The sandbox's own files still are.
  auto ok = Put("/work/plain.txt", "plain");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 204) << ok->body;
  auto back = Get("/work/plain.txt");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->body, "plain");
}

// Today's daemon opened these for writing with its own capabilities: it
// set the init's timer slack (CAP_SYS_NICE, which the sandbox lacks),
// opened /proc/pressure/cpu with O_TRUNC and fchmod'ed it (the mode here
// is its current one, so nothing changes either way), and reached sysfs
// (read-only there, so only the error differed).
TEST_P(DaemonFilesTest, WritesThroughLinksToProcAndSysFail) {
  Sh("mkdir -p /work && ln -s /proc/1/timerslack_ns /work/slack && ln -s /proc/pressure/cpu /work/psi && "
     "ln -s /sys/kernel/mm/transparent_hugepage/enabled /work/thp");
  struct stat before {};
  const bool have_psi = ::stat("/proc/pressure/cpu", &before) == 0;
  ExpectRefused(Put("/work/slack", "50001"), "timerslack_ns");
  ExpectRefused(Put("/work/thp", "never"), "sysfs");
  ExpectRefused(Put("/proc/1/timerslack_ns", "50001"), "direct timerslack_ns");
  if (have_psi) {
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", before.st_mode & 07777);
    ExpectRefused(Put("/work/psi", "bogus", mode), "pressure");
    struct stat after {};
    ASSERT_EQ(::stat("/proc/pressure/cpu", &after), 0);
    EXPECT_EQ(after.st_mode, before.st_mode);
  }
  // Nothing was created beside the links either.
  EXPECT_EQ(Sh("ls /work | tr '\\n' ' '")["stdout"], "psi slack thp ");
}

// A FIFO or a device is never opened: reading a FIFO nobody writes would
// block (today's O_NONBLOCK open only hid it), and opening a device node
// has effects of its own.
TEST_P(DaemonFilesTest, FifosAndDevicesAreRefusedWithoutBlocking) {
  Sh("mkdir -p /work && mkfifo /work/fifo && ln -s /dev/zero /work/zero");
  const auto start = std::chrono::steady_clock::now();
  for (const std::string p : {"/work/fifo", "/work/zero", "/dev/null", "/dev/zero"}) {
    ExpectRefused(Get(p), p);
    ExpectRefused(Put(p, "x"), p);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  auto health = client_->Get("/v1/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// Links inside the root keep working: a relative one, an absolute one
// (taken inside the root), and a dangling one, whose target is created.
TEST_P(DaemonFilesTest, LinksInsideTheRootStillWork) {
  Sh("mkdir -p /work/d && echo inside > /work/d/f && ln -s d/f /work/rel && ln -s /work/d/f /work/abs && "
     "ln -s /work/d/new /work/dangling && ln -s /work/d /work/dirlink");
  for (const std::string p : {"/work/rel", "/work/abs", "/work/dirlink/f"}) {
    auto r = Get(p);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << p << " " << r->body;
    EXPECT_EQ(r->body, "inside\n") << p;
  }
  auto w = Put("/work/dangling", "made", "0600");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->status, 204) << w->body;
  EXPECT_EQ(Sh("cat /work/d/new; stat -c ' %a %u' /work/d/new")["stdout"], "made 600 0\n");
  auto deep = Put("/work/dirlink/x/y/z.txt", "deep");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->status, 204) << deep->body;
  EXPECT_EQ(Sh("cat /work/d/x/y/z.txt")["stdout"], "deep");
  auto ls = client_->Get(absl::StrCat("/v1/sandboxes/", id_, "/files/list?path=/work/dirlink"));
  ASSERT_TRUE(ls);
  EXPECT_EQ(ls->status, 200) << ls->body;
  EXPECT_EQ(testing::JsonOf(ls)["entries"].size(), 3u) << ls->body;
  auto tmp = Put("/dev/shm/t", "shm");
  ASSERT_TRUE(tmp);
  EXPECT_EQ(tmp->status, 204) << tmp->body;
}

// A file the API writes takes the sandbox's memory (its writable layer is
// memory), not the daemon's: a sandbox of 16 MiB cannot be given more
// than it holds through the API. (Before, the daemon wrote the data itself:
// where the writable layer is a directory of the node's shared store,
// bounded by the sandbox's memory limit alone, a 64 MiB sandbox took 192
// MiB of files, charged to no limit of its.) A write that does not fit is
// refused (429), leaves an empty file and the sandbox its memory back, and
// the sandbox goes on. In a user namespace the writable layer is a tmpfs
// of its own (16 MiB here), which may refuse first.
TEST_P(DaemonFilesTest, WritesAreBoundedByTheSandboxsMemory) {
  auto made = client_->Post("/v1/sandboxes",
                            json{{"tier", "container"}, {"user_namespace", GetParam()}, {"memory_mib", 16}}.dump(),
                            kJson);
  ASSERT_TRUE(made);
  ASSERT_EQ(made->status, 201) << made->body;
  const std::string small = testing::JsonOf(made)["id"];
  auto put = [&](const std::string& path, size_t bytes) {
    return client_->Put(absl::StrCat("/v1/sandboxes/", small, "/files?path=", path), std::string(bytes, 'x'),
                        kOctets);
  };
  auto sh = [&](const std::string& script) {
    auto r = client_->Post(absl::StrCat("/v1/sandboxes/", small, "/exec"),
                           json{{"argv", {"sh", "-c", script}}}.dump(), kJson);
    return r && r->status == 200 ? testing::JsonOf(r) : json(nullptr);
  };
  auto first = put("/tmp/first", 6u << 20);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 204) << first->body;
  auto second = put("/tmp/second", 12u << 20);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 429) << second->body.substr(0, 300);
  const bool by_memory = second->body.find("memory limit does not hold /tmp/second") != std::string::npos;
  const bool by_size = second->body.find("writable layer is full (/tmp/second)") != std::string::npos;
  EXPECT_TRUE(GetParam() ? by_memory || by_size : by_memory) << second->body;
  // The first file whole, the second empty, and the sandbox answers.
  json sizes = sh("wc -c < /tmp/first; wc -c < /tmp/second");
  ASSERT_TRUE(sizes.is_object());
  EXPECT_EQ(sizes["stdout"], absl::StrCat(6u << 20, "\n0\n"));
  // Its memory came back: without the first file a larger one fits.
  ASSERT_EQ(sh("rm /tmp/first")["exit_code"], 0);
  auto again = put("/tmp/second", 8u << 20);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 204) << again->body.substr(0, 300);
  EXPECT_EQ(sh("wc -c < /tmp/second")["stdout"], absl::StrCat(8u << 20, "\n"));
  // Paused, it writes nothing (its own process would write): 409.
  auto paused = client_->Post(absl::StrCat("/v1/sandboxes/", small, "/pause"), "", kJson);
  ASSERT_TRUE(paused);
  ASSERT_EQ(paused->status, 200) << paused->body;
  auto refused = put("/tmp/third", 10);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 409) << refused->body;
  ASSERT_TRUE(client_->Post(absl::StrCat("/v1/sandboxes/", small, "/resume"), "", kJson));
  auto third = put("/tmp/third", 10);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 204) << third->body;
  client_->Delete(absl::StrCat("/v1/sandboxes/", small));
}

INSTANTIATE_TEST_SUITE_P(Modes, DaemonFilesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "UserNamespace" : "Default";
                         });

}  // namespace
}  // namespace dsec::daemon

// SPDX-License-Identifier: Apache-2.0
// The daemon's memory across a long run of malformed and oversized
// requests (issue 23: RSS grew 70 -> 607 MiB over such a session and
// stayed). A dsec-vmmd child (DSEC_VMMD=path measures another build),
// N clients, each round: a 500k-deep JSON array, 40 ranges of a 16 MiB
// file, a 64 MiB body to a 1 MiB route, a 900 KB env value, a chunked
// 2 MiB body, a Content-Length of -5. Prints the daemon's VmRSS before and
// after and its peak (VmHWM), one line `malformed-run: ...`; fails when
// the run leaves more than 96 MiB behind. DSEC_MALFORMED_ROUNDS and
// DSEC_MALFORMED_CLIENTS set the rounds (10) and clients (8): a daemon
// that builds the 671 MB range answer needs ~1.4 GiB per client at once.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/exec_pump.h"
#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;
using testing::ReadResponse;
using testing::SendAll;

constexpr char kJson[] = "application/json";

// One malformed request on a fresh connection; the answer's head is read
// (at most `timeout_ms`), the rest of it is not.
void Shoot(const std::string& socket, const std::string& head, const std::string& body, int timeout_ms) {
  auto fd = testing::ConnectUnix(socket);
  if (!fd.ok()) return;
  if (SendAll(fd->get(), head)) {
    // In pieces, so that a refusal stops the sending (a daemon that reads
    // everything gets everything).
    for (size_t off = 0; off < body.size(); off += 1 << 20) {
      if (!SendAll(fd->get(), std::string_view(body).substr(off, 1 << 20))) break;
    }
  }
  (void)ReadResponse(fd->get(), timeout_ms, 4096);
}

TEST(MalformedRunTest, DaemonMemoryStaysBounded) {
  auto dir = TempDir::Create("dsec-daemon-malformed-");
  ASSERT_TRUE(dir.ok());
  const std::string store = dir->path() + "/store";
  if (absl::Status s = testing::BuildBusyboxLayer(store, dir->path()); !s.ok()) GTEST_SKIP() << s;
  const char* env_bin = std::getenv("DSEC_VMMD");
  const std::string binary = env_bin != nullptr && *env_bin != '\0' ? env_bin : DSEC_VMMD_BINARY_PATH;
  const char* env_rounds = std::getenv("DSEC_MALFORMED_ROUNDS");
  const int rounds = env_rounds != nullptr ? std::max(1, atoi(env_rounds)) : 10;
  const char* env_clients = std::getenv("DSEC_MALFORMED_CLIENTS");
  const int nclients = env_clients != nullptr ? std::max(1, atoi(env_clients)) : 8;
  const std::string socket = dir->path() + "/api/api.sock";

  auto ready = Pipe::Create();
  ASSERT_TRUE(ready.ok());
  SpawnOptions o;
  o.argv = {binary, "--socket", socket, "--trajectory-dir", dir->path() + "/trj",
            "--container-state-dir", dir->path() + "/ctr", "--fncall-state-dir", dir->path() + "/fn",
            "--store", store, "--upper-mib", "64", "--no-qos-placement", "--container-init-pool", "0",
            "--net-subnet", "10.247.0.0/16", "--log-level", "error"};
  o.out = Stdio::Fd(ready->write.get());
  o.err = Stdio::Inherit();
  auto daemon = Subprocess::Spawn(o);
  ready->write.Reset();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::string line;
  char ch;
  while (::read(ready->read.get(), &ch, 1) == 1 && ch != '\n') line += ch;
  ASSERT_EQ(line.rfind("dsec-vmmd ready", 0), 0u) << line;
  const pid_t pid = daemon->pid();

  auto c = testing::UnixClient(socket);
  auto r = c->Post("/v1/sandboxes", json{{"tier", "container"}, {"layers", {"bb:1"}}}.dump(), kJson);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  const std::string id = testing::JsonOf(r)["id"];
  const std::string files = absl::StrCat("/v1/sandboxes/", id, "/files?path=/big");
  auto put = c->Put(files, std::string(16 << 20, 'x'), "application/octet-stream");
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 204) << put->body;
  ASSERT_TRUE(c->Get("/v1/health"));
  c.reset();
  const int64_t before = testing::StatusKib(pid);

  const std::string deep = std::string(500000, '[') + std::string(500000, ']');
  const std::string big(64 << 20, ' ');
  std::string forty = "bytes=0-";
  for (int i = 1; i < 40; ++i) forty += ",0-";
  const std::string env_body = json{{"argv", {"true"}}, {"env", {{"BIG", std::string(900000, 'x')}}}}.dump();
  std::string chunked;
  for (int i = 0; i < 32; ++i) absl::StrAppend(&chunked, "10000\r\n", std::string(65536, ' '), "\r\n");
  chunked += "0\r\n\r\n";
  auto post = [](const std::string& path, size_t len) {
    return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ",
                        len, "\r\n\r\n");
  };
  const int64_t start = MonotonicNowNs();
  std::vector<std::thread> clients;
  for (int t = 0; t < nclients; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        Shoot(socket, post("/v1/sandboxes", deep.size()), deep, 10000);
        Shoot(socket, absl::StrCat("GET ", files, " HTTP/1.1\r\nHost: x\r\nRange: ", forty, "\r\n\r\n"), "", 10000);
        Shoot(socket, post("/v1/sandboxes", big.size()), big, 10000);
        Shoot(socket, post(absl::StrCat("/v1/sandboxes/", id, "/exec"), env_body.size()), env_body, 10000);
        Shoot(socket, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", chunked,
              10000);
        Shoot(socket, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", "", 2000);
      }
    });
  }
  for (auto& t : clients) t.join();
  const double seconds = static_cast<double>(MonotonicNowNs() - start) / 1e9;
  const int64_t after = testing::StatusKib(pid);
  const int64_t peak = testing::StatusKib(pid, "VmHWM");
  // The daemon still answers.
  auto h = testing::UnixClient(socket)->Get("/v1/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  printf("malformed-run: binary=%s rounds=%d clients=%d requests=%d seconds=%.1f rss_before_mib=%.1f "
         "rss_after_mib=%.1f rss_peak_mib=%.1f\n",
         binary.c_str(), rounds, nclients, rounds * nclients * 6, seconds, before / 1024.0, after / 1024.0, peak / 1024.0);
  auto d = testing::UnixClient(socket)->Delete(absl::StrCat("/v1/sandboxes/", id));
  EXPECT_TRUE(d);
  (void)daemon->Signal(SIGTERM);
  (void)daemon->Wait();
  ASSERT_GT(before, 0);
  EXPECT_LT(after - before, 96 * 1024) << "the run left " << (after - before) / 1024 << " MiB behind";
}

}  // namespace
}  // namespace dsec::daemon

// SPDX-License-Identifier: Apache-2.0
// A fncall sandbox with a network through the API over a unix socket: the
// daemon's create, GET (one network per sandbox, an address per worker),
// PATCH reaching every worker, /metrics, and DELETE leaving nothing. The
// node network has no uplink: the test process listens on the sandbox's
// gateway (the host ends of its workers' veths), so no packet leaves the
// machine. Root (netlink, nftables, BPF, cgroups); label integration.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"
#include "sandbox/daemon/http_server.h"
#include "sandbox/fncall/fncall_testing.h"
#include "sandbox/network/node_network.h"
#include "sandbox/network/test_network.h"

namespace dsec::daemon {
namespace {

using container::testing::TempDir;
using nlohmann::json;

constexpr char kJson[] = "application/json";

// One line per port: "ok <our address>" or the errno name.
constexpr char kProbe[] = R"(
import errno, socket, sys
for port in sys.argv[2:]:
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((sys.argv[1], int(port)))
        print("ok " + s.getsockname()[0])
    except socket.timeout:
        print("timeout")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
    finally:
        s.close()
)";

using Listener = network::testing::HostListener;

TEST(NetworkHttpTest, AFncallSandboxHasOneNetworkWithAnAddressPerWorker) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (netlink, nftables, BPF, cgroups)";
  if (!fncall::testing::EnsureTestLayers().ok()) GTEST_SKIP() << "no fncall test layers";
  auto dir = TempDir::Create("dsec-daemon-net-http-");
  ASSERT_TRUE(dir.ok());
  const std::string store = dir->path() + "/store";
  if (absl::Status s = testing::BuildBusyboxLayer(store, dir->path()); !s.ok()) GTEST_SKIP() << s;
  const int x = getpid() % 250;
  network::NodeNetworkOptions no;
  no.subnet = absl::StrCat("10.247.", x, ".0/24");
  network::NodeNetworkProvider provider(no);
  ServiceOptions so;
  so.start_reaper = true;
  so.node_network = [&provider] { return provider.Get(); };
  so.network_health = [&provider] { return provider.Health(); };
  auto d = testing::LocalDaemon::Start(dir->path() + "/run", store, std::move(so), {});
  ASSERT_TRUE(d.ok()) << d.status();
  auto c = testing::UnixClient((*d)->socket());

  auto r = c->Post("/v1/sandboxes", json{{"tier", "fncall"}, {"network", json::object()}}.dump(), kJson);
  ASSERT_TRUE(r);
  if (r->status == 503) GTEST_SKIP() << "no sandbox networking here: " << r->body;
  ASSERT_EQ(r->status, 201) << r->body;
  json sb = testing::JsonOf(r);
  const std::string id = sb["id"];
  const std::string gw = sb["network"]["gateway"];
  EXPECT_EQ(gw, absl::StrCat("10.247.", x, ".1"));
  ASSERT_GE(sb["network"]["addresses"].size(), 1u) << sb["network"];
  EXPECT_EQ(sb["network"]["address"], sb["network"]["addresses"][0]);

  Listener a(gw), b(gw);
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  // Each call's lines, and the addresses the workers connected from.
  std::set<std::string> from;
  int calls = 0;
  auto call = [&](std::vector<std::string> want) {
    auto e = c->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"),
                     json{{"code", kProbe}, {"argv", {gw, std::to_string(a.port()), std::to_string(b.port())}}}.dump(),
                     kJson);
    ASSERT_TRUE(e);
    ASSERT_EQ(e->status, 200) << e->body;
    ++calls;
    std::vector<std::string> got =
        absl::StrSplit(absl::StripTrailingAsciiWhitespace(testing::JsonOf(e)["stdout"].get<std::string>()), '\n');
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (want[i] == "ok") {
        ASSERT_TRUE(absl::StartsWith(got[i], "ok 10.247.")) << got[i];
        from.insert(got[i].substr(3));
      } else {
        EXPECT_EQ(got[i], want[i]);
      }
    }
  };
  auto patch = [&](int port) {
    auto p = c->Patch(absl::StrCat("/v1/sandboxes/", id, "/network"),
                      json{{"egress", {{"allow", {absl::StrCat(gw, ":", port)}}}}}.dump(), kJson);
    ASSERT_TRUE(p);
    ASSERT_EQ(p->status, 200) << p->body;
  };

  // Calls until both workers (the second starts behind the first call)
  // answered, up to a deadline.
  auto on_both = [&](std::vector<std::string> want) {
    from.clear();
    const int64_t deadline = MonotonicNowNs() + 10'000'000'000;
    while (from.size() < 2 && MonotonicNowNs() < deadline && !::testing::Test::HasFailure()) call(want);
    EXPECT_EQ(from.size(), 2u) << "two workers served the calls";
  };
  call({"EPERM", "EPERM"});  // nothing allowed yet
  patch(a.port());
  on_both({"ok", "EPERM"});
  std::set<std::string> workers = from;
  patch(b.port());
  on_both({"EPERM", "ok"});
  EXPECT_EQ(from, workers) << "the same two workers, each changed at once";
  const int allowed = calls - 1;

  auto g = c->Get(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(g);
  json net = testing::JsonOf(g)["network"];
  EXPECT_EQ(net["egress"]["allow"], json::array({absl::StrCat(gw, ":", b.port())}));
  EXPECT_EQ(net["addresses"].size(), 2u) << net;
  std::set<std::string> listed;
  for (const json& addr : net["addresses"]) listed.insert(addr.get<std::string>());
  EXPECT_EQ(listed, from);
  EXPECT_EQ(net["counters"]["connects_allowed"], allowed) << "summed over the workers";
  EXPECT_EQ(net["counters"]["connects_denied"], calls * 2 - allowed);
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_TRUE(absl::StrContains(m->body, absl::StrFormat(
                                             "dsec_sandbox_network_connects_allowed_total{sandbox=\"%s\"} %d\n", id, allowed)))
      << m->body;

  auto del = c->Delete(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 204);
  for (const std::string& addr : listed) {
    unsigned p1, p2, p3, p4;
    ASSERT_EQ(sscanf(addr.c_str(), "%u.%u.%u.%u", &p1, &p2, &p3, &p4), 4);
    const std::string veth = absl::StrFormat("/sys/class/net/ds%02x%02x%02x%02x", p1, p2, p3, p4);
    EXPECT_NE(access(veth.c_str(), F_OK), 0) << veth;
  }
  auto node = provider.Get();
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)->leased(), 0u);
  c.reset();
  d->reset();
}

}  // namespace
}  // namespace dsec::daemon

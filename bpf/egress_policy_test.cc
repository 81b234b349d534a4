// SPDX-License-Identifier: Apache-2.0
// The egress programs in the real kernel: a cgroup v2 directory of the
// test's own, a child process in it (python3) that connects and sends to
// listeners this test opened on loopback, and the policy's verdicts, its
// run-time changes, its counters and its detachment. Traffic stays on
// 127.0.0.1 / ::1.
#include "bpf/egress_policy.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/scoped_fd.h"
#include "base/subprocess.h"
#include "bpf/test_cgroup.h"
#include "gtest/gtest.h"

namespace dsec::bpf {
namespace {

// Tries each target ("tcp4 HOST PORT", "udp4 ...", "tcp6 ...") and prints
// one word per target: ok or the errno name.
constexpr char kProbe[] = R"(
import errno, socket, sys
for t in sys.argv[1:]:
    kind, host, port = t.split(",")
    fam = socket.AF_INET6 if kind.endswith("6") else socket.AF_INET
    typ = socket.SOCK_DGRAM if kind.startswith("udp") else socket.SOCK_STREAM
    if kind == "icmp4":
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    else:
        s = socket.socket(fam, typ)
    try:
        if kind == "icmp4":
            s.sendto(bytes([8, 0, 0xf7, 0xff, 0, 0, 0, 0]), (host, 0))  # echo request, checksummed
        elif typ == socket.SOCK_DGRAM:
            s.sendto(b"x", (host, int(port)))
        else:
            s.settimeout(5)
            s.connect((host, int(port)))
        print("ok")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
    finally:
        s.close()
)";

class EgressPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF, cgroups)";
    cgroup_dir_ = std::make_unique<TestCgroup>("egress");
    if (cgroup_dir_->path().empty()) GTEST_SKIP() << "no cgroup v2 hierarchy mounted";
    cgroup_ = cgroup_dir_->path();
    auto policy = EgressPolicy::Load();
    if (!policy.ok()) GTEST_SKIP() << policy.status();
    policy_ = std::move(*policy);
    if (absl::Status s = policy_->AttachToCgroup(cgroup_); !s.ok()) GTEST_SKIP() << s;
    open_port_ = Listen(AF_INET, &listen4_a_);
    other_port_ = Listen(AF_INET, &listen4_b_);
    v6_port_ = Listen(AF_INET6, &listen6_);
  }
  void TearDown() override {
    policy_.reset();
    cgroup_dir_.reset();  // after the policy and the child are gone
  }

  static int Listen(int family, ScopedFd* fd) {
    fd->Reset(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_TRUE(fd->valid());
    sockaddr_storage ss{};
    socklen_t len;
    if (family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_loopback;
      len = sizeof(*a);
    }
    EXPECT_EQ(bind(fd->get(), reinterpret_cast<sockaddr*>(&ss), len), 0) << strerror(errno);
    EXPECT_EQ(listen(fd->get(), 16), 0);
    EXPECT_EQ(getsockname(fd->get(), reinterpret_cast<sockaddr*>(&ss), &len), 0);
    return family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                             : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  }

  // One word per target, from a child in the test's cgroup.
  std::vector<std::string> Probe(const std::vector<std::string>& targets) {
    SpawnOptions o;
    o.argv = {"/usr/bin/python3", "-c", kProbe};
    o.argv.insert(o.argv.end(), targets.begin(), targets.end());
    o.out = Stdio::Capture();
    o.err = Stdio::Capture();
    o.join_cgroup_procs = {cgroup_ + "/cgroup.procs"};
    o.timeout_ms = 60'000;
    auto r = RunSubprocess(o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return absl::StrSplit(absl::StripTrailingAsciiWhitespace(r->out), '\n');
  }

  std::string Tcp4(int port) { return absl::StrCat("tcp4,127.0.0.1,", port); }

  std::unique_ptr<TestCgroup> cgroup_dir_;
  std::string cgroup_;
  std::unique_ptr<EgressPolicy> policy_;
  ScopedFd listen4_a_, listen4_b_, listen6_;
  int open_port_ = 0, other_port_ = 0, v6_port_ = 0;
};

EgressRule Rule(const std::string& text) {
  auto r = ParseEgressRule(text);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : EgressRule{};
}

TEST_F(EgressPolicyTest, NothingAllowedRefusesEveryConnectAtOnce) {
  EXPECT_EQ(Probe({Tcp4(open_port_), absl::StrCat("tcp6,::1,", v6_port_),
                   absl::StrCat("udp4,127.0.0.1,", other_port_)}),
            (std::vector<std::string>{"EPERM", "EPERM", "EPERM"}));
  auto c = policy_->Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->allowed, 0u);
  EXPECT_EQ(c->denied, 3u);
}

TEST_F(EgressPolicyTest, AnAllowedAddressAndPortAreReachableOthersAreNot) {
  ASSERT_TRUE(policy_->Allow(Rule(absl::StrCat("127.0.0.1/32:", open_port_))).ok());
  EXPECT_EQ(Probe({Tcp4(open_port_), Tcp4(other_port_), absl::StrCat("udp4,127.0.0.1,", other_port_),
                   absl::StrCat("tcp6,::1,", v6_port_),
                   // an IPv4-mapped address on an IPv6 socket follows the IPv4 rules
                   absl::StrCat("tcp6,::ffff:127.0.0.1,", open_port_),
                   absl::StrCat("tcp6,::ffff:127.0.0.1,", other_port_)}),
            (std::vector<std::string>{"ok", "EPERM", "EPERM", "EPERM", "ok", "EPERM"}));
  auto c = policy_->Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->allowed, 2u);
  EXPECT_EQ(c->denied, 4u);
}

TEST_F(EgressPolicyTest, PrefixAndIpv6RulesAndDenyWins) {
  ASSERT_TRUE(policy_->Allow(Rule("127.0.0.0/8")).ok());
  ASSERT_TRUE(policy_->Allow(Rule(absl::StrCat("[::1]:", v6_port_))).ok());
  ASSERT_TRUE(policy_->Deny(Rule(absl::StrCat("127.0.0.1:", other_port_))).ok());
  EXPECT_EQ(Probe({Tcp4(open_port_), Tcp4(other_port_), absl::StrCat("tcp6,::1,", v6_port_)}),
            (std::vector<std::string>{"ok", "EPERM", "ok"}));
}

TEST_F(EgressPolicyTest, ChangesTakeEffectForTheNextConnect) {
  const EgressRule allow = Rule(absl::StrCat("127.0.0.1:", open_port_));
  ASSERT_TRUE(policy_->Allow(allow).ok());
  EXPECT_EQ(Probe({Tcp4(open_port_)}), (std::vector<std::string>{"ok"}));
  const EgressRule deny = Rule("127.0.0.0/8");
  ASSERT_TRUE(policy_->Deny(deny).ok());
  EXPECT_EQ(Probe({Tcp4(open_port_)}), (std::vector<std::string>{"EPERM"}));
  ASSERT_TRUE(policy_->RemoveDeny(deny).ok());
  EXPECT_EQ(Probe({Tcp4(open_port_)}), (std::vector<std::string>{"ok"}));
  ASSERT_TRUE(policy_->RemoveAllow(allow).ok());
  EXPECT_EQ(Probe({Tcp4(open_port_)}), (std::vector<std::string>{"EPERM"}));
  EXPECT_EQ(policy_->RemoveAllow(allow).code(), absl::StatusCode::kNotFound);
}

TEST_F(EgressPolicyTest, DestroyingThePolicyDetachesIt) {
  EXPECT_EQ(Probe({Tcp4(open_port_)}), (std::vector<std::string>{"EPERM"}));
  policy_.reset();
  EXPECT_EQ(Probe({Tcp4(open_port_)}), (std::vector<std::string>{"ok"}));
}

TEST_F(EgressPolicyTest, RawIcmpMeetsTheSecondWall) {
  // A raw socket's packet passes no connect/sendmsg hook; the cgroup_skb
  // program drops it unless a rule for every port allows its address.
  EXPECT_EQ(Probe({"icmp4,127.0.0.1,0"}), (std::vector<std::string>{"EPERM"}));
  auto c = policy_->Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->denied, 0u);  // no sock_addr hook saw it
  EXPECT_EQ(c->packets_dropped, 1u);
  ASSERT_TRUE(policy_->Allow(Rule("127.0.0.1:80")).ok());  // a port rule does not cover ICMP
  EXPECT_EQ(Probe({"icmp4,127.0.0.1,0"}), (std::vector<std::string>{"EPERM"}));
  ASSERT_TRUE(policy_->Allow(Rule("127.0.0.1")).ok());
  EXPECT_EQ(Probe({"icmp4,127.0.0.1,0"}), (std::vector<std::string>{"ok"}));
}

TEST_F(EgressPolicyTest, AllowedTrafficPassesTheSecondWallToo) {
  // The cgroup_skb wall checks every packet of an allowed connection as
  // well, by the same rules: it lets them through and counts them.
  const EgressRule allow = Rule(absl::StrCat("127.0.0.1:", open_port_));
  ASSERT_TRUE(policy_->Allow(allow).ok());
  auto c0 = policy_->Counters();
  ASSERT_TRUE(c0.ok());
  EXPECT_EQ(Probe({Tcp4(open_port_)}), (std::vector<std::string>{"ok"}));
  auto c1 = policy_->Counters();
  ASSERT_TRUE(c1.ok());
  EXPECT_GT(c1->packets_allowed, c0->packets_allowed);  // the SYN at least
  EXPECT_EQ(c1->packets_dropped, 0u);
}

TEST_F(EgressPolicyTest, AnOpenConnectionOutlivesTheRuleThatAdmittedIt) {
  // A rule removed (or a domain's address expired) stops new connections;
  // a connection it admitted keeps flowing through the second wall.
  const EgressRule allow = Rule(absl::StrCat("127.0.0.1:", open_port_));
  ASSERT_TRUE(policy_->Allow(allow).ok());
  int go[2], done[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(done, O_CLOEXEC), 0);
  ScopedFd go_r(go[0]), go_w(go[1]), done_r(done[0]), done_w(done[1]);
  const std::string procs = cgroup_ + "/cgroup.procs";
  const int port = open_port_;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: into the cgroup, connect, report, wait, send, report.
    char verdict = 'x';
    close(go[1]);  // so that a parent that gave up ends the wait below
    close(done[0]);
    const int cg = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (cg >= 0 && write(cg, "0", 1) == 1) {
      const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(port));
      if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
        verdict = 'c';
        (void)!write(done[1], &verdict, 1);
        char b;
        (void)!read(go[0], &b, 1);
        verdict = send(s, "hello", 5, MSG_NOSIGNAL) == 5 ? 'o' : 'e';
      }
    }
    (void)!write(done[1], &verdict, 1);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(done_r.get(), &c, 1), 1);
  ASSERT_EQ(c, 'c');
  ScopedFd conn(accept4(listen4_a_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(conn.valid()) << strerror(errno);
  ASSERT_TRUE(policy_->RemoveAllow(allow).ok());
  ASSERT_EQ(write(go_w.get(), "g", 1), 1);
  ASSERT_EQ(read(done_r.get(), &c, 1), 1);
  EXPECT_EQ(c, 'o');
  pollfd p{conn.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10'000), 1);
  char buf[8] = {};
  EXPECT_EQ(recv(conn.get(), buf, sizeof(buf), 0), 5);
  EXPECT_EQ(std::string(buf), "hello");
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  // A new connection to the same address is refused now.
  EXPECT_EQ(Probe({Tcp4(open_port_)}), (std::vector<std::string>{"EPERM"}));
}

TEST_F(EgressPolicyTest, OnePolicyOnASecondCgroupSharesItsRulesAndCounters) {
  TestCgroup second_dir("egress2");
  ASSERT_FALSE(second_dir.path().empty());
  auto links = policy_->Attach(second_dir.path());
  ASSERT_TRUE(links.ok()) << links.status();
  ASSERT_TRUE(policy_->Allow(Rule(absl::StrCat("127.0.0.1/32:", open_port_))).ok());
  const std::string first = cgroup_;
  cgroup_ = second_dir.path();
  EXPECT_EQ(Probe({Tcp4(open_port_), Tcp4(other_port_)}), (std::vector<std::string>{"ok", "EPERM"}));
  cgroup_ = first;
  EXPECT_EQ(Probe({Tcp4(open_port_), Tcp4(other_port_)}), (std::vector<std::string>{"ok", "EPERM"}));
  auto c = policy_->Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->allowed, 2u);
  EXPECT_EQ(c->denied, 2u);
  // Detached from the second cgroup only.
  links->reset();
  cgroup_ = second_dir.path();
  EXPECT_EQ(Probe({Tcp4(other_port_)}), (std::vector<std::string>{"ok"}));
  cgroup_ = first;
  EXPECT_EQ(Probe({Tcp4(other_port_)}), (std::vector<std::string>{"EPERM"}));
  EXPECT_EQ(policy_->Attach(second_dir.path() + "/no-such-dir").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EgressPolicyTest, AttachingTwiceOrToAMissingCgroupIsAClearError) {
  EXPECT_EQ(policy_->AttachToCgroup(cgroup_).code(), absl::StatusCode::kFailedPrecondition);
  auto other = EgressPolicy::Load();
  ASSERT_TRUE(other.ok()) << other.status();
  absl::Status s = (*other)->AttachToCgroup(cgroup_ + "/no-such-dir");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(s.message()).find("no-such-dir"), std::string::npos);
}

}  // namespace
}  // namespace dsec::bpf

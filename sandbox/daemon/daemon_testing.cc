// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/daemon_testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "sandbox/container/container_tier.h"
#include "sandbox/container/test_image.h"
#include "sandbox/fncall/fncall_testing.h"
#include "sandbox/fncall/fncall_tier.h"
#include "sandbox/layers/layer_store.h"
#include "base/status.h"

namespace dsec::daemon::testing {

absl::Status BuildBusyboxLayer(const std::string& store_root, const std::string& work_dir) {
  const std::string tree = absl::StrCat(work_dir, "/bb-tree");
  DSEC_RETURN_IF_ERROR(container::testing::BuildBusyboxTree(tree));
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(store_root));
  const layers::BuildRequest req{std::string("bb"), std::string("1"), {}, std::string()};
  return store.Build(tree, req).status();
}

absl::Status MakeBusyboxSuiteDir(const std::string& prefix, container::testing::TempDir** dir,
                                 std::string* skip) {
  auto made = container::testing::TempDir::Create(prefix);
  if (!made.ok()) return made.status();
  *dir = new container::testing::TempDir(std::move(*made));
  absl::Status s = BuildBusyboxLayer((*dir)->path() + "/store", (*dir)->path());
  if (!s.ok()) *skip = absl::StrCat("busybox layer: ", s.ToString());
  return absl::OkStatus();
}

LayerResolver StoreResolver(const std::string& store_root, const std::string& fncall_image) {
  return [store_root, fncall_image](const std::string& tier, const std::vector<std::string>& refs)
             -> absl::StatusOr<std::vector<std::string>> {
    DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(store_root));
    std::vector<std::string> images;
    auto add = [&images](const std::string& image) {
      if (std::find(images.begin(), images.end(), image) == images.end()) images.push_back(image);
    };
    for (const std::string& ref : refs) {
      // The tiers' default layers stand for what the test built: the
      // busybox layer for base:bookworm (the fncall image brings its own
      // root), the fncall image for python:1.
      if (ref == "base:bookworm" && tier == "fncall") continue;
      if (ref == "python:1") {
        add(fncall_image);
        continue;
      }
      const std::string want = ref == "base:bookworm" ? "bb:1" : ref;
      DSEC_ASSIGN_OR_RETURN(std::vector<layers::LayerInfo> chain, store.Chain(want));
      for (const layers::LayerInfo& l : chain) add(l.image_path);
    }
    return images;
  };
}

absl::StatusOr<std::unique_ptr<LocalDaemon>> LocalDaemon::Start(const std::string& run_dir,
                                                                const std::string& store,
                                                                ServiceOptions so, HttpOptions ho) {
  for (const char* sub : {"", "/ctr", "/fn"}) {
    const std::string dir = run_dir + sub;
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoToStatus("mkdir " + dir);
  }
  std::string fncall_image;
  if (auto l = fncall::testing::EnsureTestLayers(); l.ok()) fncall_image = l->runtime;
  so.resolve_layers = StoreResolver(store, fncall_image);
  if (so.layer_store.empty()) so.layer_store = store;
  if (so.snapshot_dir.empty()) so.snapshot_dir = run_dir + "/snapshots";
  std::vector<std::unique_ptr<tier::Tier>> tiers;
  tiers.push_back(std::make_unique<container::ContainerTier>(
      container::ContainerTierOptions{run_dir + "/ctr", 16 << 20}));
  fncall::FncallTierOptions fo;
  fo.state_root = run_dir + "/fn";
  fo.max_workers_per_pool = 2;
  tiers.push_back(std::make_unique<fncall::FncallTier>(fo));
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<trajectory::TrajectoryStore> trajectories,
                        trajectory::TrajectoryStore::Open(run_dir + "/trj", {}));
  std::unique_ptr<LocalDaemon> d(new LocalDaemon());
  d->service_ = std::make_unique<Service>(std::move(so), std::move(tiers), std::move(trajectories));
  ho.socket_path = run_dir + "/api/api.sock";
  d->socket_ = ho.socket_path;
  DSEC_ASSIGN_OR_RETURN(d->server_, HttpServer::Start(d->service_.get(), ho));
  return d;
}

LocalDaemon::~LocalDaemon() {
  if (server_) server_->Stop();
  server_.reset();
  service_.reset();
}

std::unique_ptr<httplib::Client> UnixClient(const std::string& socket_path) {
  auto c = std::make_unique<httplib::Client>(socket_path);
  c->set_address_family(AF_UNIX);
  c->set_read_timeout(60, 0);
  c->set_write_timeout(60, 0);
  return c;
}

nlohmann::json JsonOf(const httplib::Result& r) {
  if (!r) return nullptr;
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

absl::StatusOr<ScopedFd> ConnectUnix(const std::string& socket_path) {
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoToStatus("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError("socket path too long");
  memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoToStatus("connect " + socket_path);
  }
  return fd;
}

absl::StatusOr<ScopedFd> ConnectTcp(int port, const std::string& source_ip) {
  ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoToStatus("socket");
  sockaddr_in src{};
  src.sin_family = AF_INET;
  if (::inet_pton(AF_INET, source_ip.c_str(), &src.sin_addr) != 1) return absl::InvalidArgumentError(source_ip);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) return ErrnoToStatus("bind");
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) return ErrnoToStatus("connect");
  return fd;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

RawResponse ReadResponse(int fd, int timeout_ms, size_t max_body) {
  RawResponse r;
  const int64_t start = MonotonicNowNs();
  const int64_t deadline = start + int64_t{timeout_ms} * 1'000'000;
  std::string buf;
  size_t head_end = std::string::npos;
  while (true) {
    if (head_end == std::string::npos) {
      head_end = buf.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        r.elapsed_ms = (MonotonicNowNs() - start) / 1'000'000;
        r.head = buf.substr(0, head_end);
        r.body = buf.substr(head_end + 4);
        absl::string_view line = absl::string_view(r.head).substr(0, r.head.find("\r\n"));
        if (line.size() >= 12) (void)absl::SimpleAtoi(line.substr(9, 3), &r.status);
        std::string lower = absl::AsciiStrToLower(r.head);
        if (auto p = lower.find("\r\ncontent-length:"); p != std::string::npos) {
          size_t e = lower.find("\r\n", p + 2);
          (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(lower).substr(
                                     p + 17, e == std::string::npos ? std::string::npos : e - p - 17)),
                                 &r.content_length);
        }
      }
    }
    if (head_end != std::string::npos &&
        r.body.size() >= std::min<uint64_t>(r.content_length, max_body)) {
      r.complete = r.body.size() >= r.content_length;
      if (r.body.size() > max_body) r.body.resize(max_body);
      return r;
    }
    const int64_t left_ms = (deadline - MonotonicNowNs()) / 1'000'000;
    if (left_ms <= 0) return r;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left_ms)) <= 0) continue;
    char chunk[65536];
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      if (head_end != std::string::npos) r.complete = r.body.size() >= r.content_length;
      return r;
    }
    (head_end == std::string::npos ? buf : r.body).append(chunk, static_cast<size_t>(n));
  }
}

int64_t StatusKib(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    int64_t kib = -1;
    std::string v(absl::StripAsciiWhitespace(line.substr(field.size() + 1)));
    if (!absl::SimpleAtoi(v.substr(0, v.find(' ')), &kib)) return -1;
    return kib;
  }
  return -1;
}

}  // namespace dsec::daemon::testing

// SPDX-License-Identifier: Apache-2.0
#include "vmm/api/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::api {

namespace {

constexpr uint64_t kMaxTargetMib = 1 << 20;  // vm run's --mem-mib limit
// Unanswered output a client may leave unread before it is dropped.
constexpr size_t kMaxPendingOutput = 1 << 20;

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("control socket path must be 1..", sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Whether something accepts connections at `addr`.
bool Listening(const sockaddr_un& addr) {
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  return fd.valid() &&
         ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
}

}  // namespace

absl::StatusOr<ControlRequest> ParseControlRequest(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("request is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("request must be a JSON object");
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) {
    return absl::InvalidArgumentError("request needs \"op\" (a string): stats, balloon, pause, resume or snapshot");
  }
  ControlRequest req;
  const std::string name = op->get<std::string>();
  for (auto [op_name, op_value] : {std::pair{"stats", ControlRequest::Op::kStats},
                                   std::pair{"pause", ControlRequest::Op::kPause},
                                   std::pair{"resume", ControlRequest::Op::kResume}}) {
    if (name != op_name) continue;
    req.op = op_value;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "op") {
        return absl::InvalidArgumentError(absl::StrCat(name, ": unknown key \"", it.key(), "\""));
      }
    }
    return req;
  }
  if (name == "snapshot") {
    req.op = ControlRequest::Op::kSnapshot;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "op" && it.key() != "diff") {
        return absl::InvalidArgumentError(absl::StrCat("snapshot: unknown key \"", it.key(), "\""));
      }
    }
    if (auto d = j.find("diff"); d != j.end()) {
      if (!d->is_boolean()) return absl::InvalidArgumentError("snapshot: \"diff\" must be true or false");
      req.diff = d->get<bool>();
    }
    return req;
  }
  if (name == "balloon") {
    req.op = ControlRequest::Op::kBalloon;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "op" && it.key() != "target_mib") {
        return absl::InvalidArgumentError(absl::StrCat("balloon: unknown key \"", it.key(), "\""));
      }
    }
    auto t = j.find("target_mib");
    if (t == j.end()) return absl::InvalidArgumentError("balloon: \"target_mib\" is required");
    if (!t->is_number_integer()) {
      return absl::InvalidArgumentError("balloon: \"target_mib\" must be an integer");
    }
    if (t->is_number_unsigned()) {
      req.target_mib = t->get<uint64_t>();
    } else {
      const int64_t v = t->get<int64_t>();
      if (v < 0) return absl::InvalidArgumentError("balloon: \"target_mib\" must be >= 0");
      req.target_mib = static_cast<uint64_t>(v);
    }
    if (req.target_mib > kMaxTargetMib) {
      return absl::InvalidArgumentError(
          absl::StrCat("balloon: \"target_mib\" must be <= ", kMaxTargetMib));
    }
    return req;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown op \"", name, "\" (known: stats, balloon, pause, resume, snapshot)"));
}

nlohmann::json ControlErrorJson(const absl::Status& status) {
  return nlohmann::json{
      {"ok", false},
      {"error",
       {{"code", absl::StatusCodeToString(status.code())},
        {"message", std::string(status.message())}}}};
}

std::string HandleControlLine(std::string_view line, const ControlHandler& handler) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  absl::StatusOr<ControlRequest> req = ParseControlRequest(line);
  if (!req.ok()) return ControlErrorJson(req.status()).dump();
  absl::StatusOr<nlohmann::json> resp = handler(*req);
  if (!resp.ok()) return ControlErrorJson(resp.status()).dump();
  // Replace invalid UTF-8 (a guest-controlled string) rather than throw.
  return resp->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(
    const std::string& path, ControlHandler handler, std::function<absl::Status()> on_thread_start) {
  if (!handler) return absl::InvalidArgumentError("control server: no handler");
  DSEC_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(absl::StrCat("--control ", path, ": exists and is not a socket"));
    }
    if (Listening(addr)) {
      return absl::AlreadyExistsError(absl::StrCat("--control ", path, ": another process listens there"));
    }
    ::unlink(path.c_str());  // stale socket of a monitor that died
  }
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoStatus("socket(AF_UNIX)");
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoToStatus(absl::StrCat("bind ", path));
  }
  // 0600 before listen(): until then nobody can connect, so no window.
  if (::chmod(path.c_str(), 0600) != 0 || ::lstat(path.c_str(), &st) != 0) {
    absl::Status s = ErrnoStatus(absl::StrCat("chmod ", path));
    ::unlink(path.c_str());
    return s;
  }
  if (::listen(fd.get(), ControlServer::kMaxClients) != 0) {
    absl::Status s = ErrnoStatus("listen");
    ::unlink(path.c_str());
    return s;
  }
  absl::StatusOr<EventFd> stop = EventFd::Create(EFD_NONBLOCK);
  if (!stop.ok()) {
    ::unlink(path.c_str());
    return stop.status();
  }
  std::unique_ptr<ControlServer> server(new ControlServer(
      path, std::move(fd), std::move(*stop), std::move(handler), st.st_dev, st.st_ino));
  ControlServer* raw = server.get();
  server->thread_ = std::thread([raw, hook = std::move(on_thread_start)] {
    if (hook) {
      if (absl::Status s = hook(); !s.ok()) {
        DSEC_LOG(err, "component=control not serving: {}", s.ToString());
        return;
      }
    }
    raw->Run();
  });
  return server;
}

ControlServer::~ControlServer() {
  (void)stop_.Signal();
  if (thread_.joinable()) thread_.join();
  // Unlink only our own socket (another monitor may have replaced a path we
  // no longer hold).
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    ::unlink(path_.c_str());
  }
}

void ControlServer::Run() {
  struct Client {
    ScopedFd fd;
    std::string in;
    std::string out;
    bool closing = false;  // close once `out` is sent
  };
  std::vector<Client> clients;
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({stop_.fd(), POLLIN, 0});
    fds.push_back({listen_fd_.get(), POLLIN, 0});
    for (const Client& c : clients) {
      fds.push_back({c.fd.get(), static_cast<short>((c.closing ? 0 : POLLIN) |
                                                     (c.out.empty() ? 0 : POLLOUT)), 0});
    }
    int n = ::poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      DSEC_LOG(err, "component=control poll: {}", std::strerror(errno));
      return;
    }
    if (fds[0].revents & POLLIN) return;
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      const short rev = fds[i + 2].revents;
      if ((rev & POLLIN) && !c.closing) {
        char buf[4096];
        ssize_t r = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
        if (r < 0 && errno != EAGAIN && errno != EINTR) {
          c.fd.Reset();
          continue;
        }
        if (r == 0) c.closing = true;  // half-closed: answer what came, then close
        if (r > 0) c.in.append(buf, static_cast<size_t>(r));
        size_t nl;
        while (!c.closing && (nl = c.in.find('\n')) != std::string::npos) {
          if (nl > kMaxControlRequestBytes) break;
          c.out += HandleControlLine(std::string_view(c.in).substr(0, nl), handler_);
          c.out += '\n';
          c.in.erase(0, nl + 1);
        }
        if (c.in.size() > kMaxControlRequestBytes) {
          c.out += ControlErrorJson(absl::InvalidArgumentError(absl::StrCat(
                                        "request longer than ", kMaxControlRequestBytes,
                                        " bytes; closing the connection")))
                       .dump();
          c.out += '\n';
          c.in.clear();
          c.closing = true;
        }
      } else if (rev & (POLLHUP | POLLERR)) {
        if (c.out.empty() || (rev & POLLERR)) {
          c.fd.Reset();
          continue;
        }
      }
      if (!c.out.empty()) {
        ssize_t w = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) c.out.erase(0, static_cast<size_t>(w));
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
          c.fd.Reset();
          continue;
        }
        // A client that does not read is dropped, never waited for.
        if (c.out.size() > kMaxPendingOutput) {
          c.fd.Reset();
          continue;
        }
      }
      if (c.closing && c.out.empty()) c.fd.Reset();
    }
    std::erase_if(clients, [](const Client& c) { return !c.fd.valid(); });
    if (fds[1].revents & POLLIN) {
      ScopedFd cfd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (cfd.valid()) {
        if (static_cast<int>(clients.size()) >= kMaxClients) {
          const std::string busy =
              ControlErrorJson(absl::ResourceExhaustedError("too many control clients")).dump() +
              "\n";
          (void)::send(cfd.get(), busy.data(), busy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        } else {
          clients.push_back(Client{std::move(cfd), {}, {}, false});
        }
      }
    }
  }
}

absl::StatusOr<nlohmann::json> ControlCall(const std::string& path,
                                           const nlohmann::json& request, int64_t timeout_ms) {
  const int64_t deadline = MonotonicNowMs() + timeout_ms;
  DSEC_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoStatus("socket(AF_UNIX)");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED || errno == EAGAIN) {
      return absl::UnavailableError(absl::StrCat("connect ", path, ": ", std::strerror(errno)));
    }
    return ErrnoToStatus(absl::StrCat("connect ", path));
  }
  auto wait = [&](short events) -> absl::Status {
    for (;;) {
      const int64_t left = deadline - MonotonicNowMs();
      if (left <= 0) {
        return absl::DeadlineExceededError(absl::StrCat("control socket ", path, ": no answer in time"));
      }
      pollfd p{fd.get(), events, 0};
      int n = ::poll(&p, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoToStatus("control: poll");
      if (n > 0) return absl::OkStatus();
    }
  };
  const std::string line = request.dump() + "\n";
  for (size_t off = 0; off < line.size();) {
    DSEC_RETURN_IF_ERROR(wait(POLLOUT));
    ssize_t n = ::send(fd.get(), line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoToStatus("control: send");
    }
    off += static_cast<size_t>(n);
  }
  std::string reply;
  for (;;) {
    DSEC_RETURN_IF_ERROR(wait(POLLIN));
    char buf[4096];
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoToStatus("control: recv");
    }
    if (n == 0) return absl::UnavailableError("control: connection closed without an answer");
    reply.append(buf, static_cast<size_t>(n));
    if (size_t nl = reply.find('\n'); nl != std::string::npos) {
      reply.resize(nl);
      break;
    }
    if (reply.size() > (16u << 20)) return absl::ResourceExhaustedError("control: answer too long");
  }
  nlohmann::json j = nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InternalError(absl::StrCat("control: answer is not JSON: ", reply.substr(0, 200)));
  }
  return j;
}

}  // namespace dsec::api

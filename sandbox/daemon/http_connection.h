// SPDX-License-Identifier: Apache-2.0
// One API client connection as the connection guard (http_guard.h) holds
// it: its socket, the client it counts against, the bytes read ahead; and
// the httplib::Stream a worker serves one request through, which gives
// cpp-httplib that request's head and at most its body, within the body's
// deadline.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <httplib.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"
#include "sandbox/daemon/http_parse.h"

namespace dsec::daemon {

// Open connections per client and in all. Threads: any; a Slot may be
// released on any thread, after its table's owner is gone too.
class ClientTable {
 public:
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&&) = default;
    Slot& operator=(Slot&&) = default;
    ~Slot();

   private:
    friend class ClientTable;
    struct Counts;
    std::shared_ptr<Counts> counts_;
    std::string client_;
  };

  ClientTable(int per_client, int total);
  // One more connection of `client`, counted until the Slot goes; or
  // ResourceExhausted naming the cap it would pass.
  absl::StatusOr<Slot> Admit(const std::string& client);
  int open() const;

 private:
  std::shared_ptr<Slot::Counts> counts_;
};

struct Connection {
  enum class State {
    kIdle,   // between requests (keep-alive), nothing read yet
    kHead,   // a head is arriving
    kDrain,  // answered and shut for writing: reading what else comes, until EOF or the deadline
  };
  ScopedFd fd;
  ClientTable::Slot slot;
  std::string client;  // "ip 10.0.0.1" / "pid 1234"
  std::string remote_ip;
  int remote_port = 0;
  std::string buf;  // read ahead, not consumed yet
  State state = State::kHead;
  int64_t deadline_ns = 0;  // of the state
  int requests = 0;         // served on this connection
  // Of the request handed to a worker (the guard parsed its head).
  RequestHead head;
  size_t head_len = 0;
  size_t body_limit = 0;
};

// The client key and address of an accepted socket: a TCP peer's address,
// a unix-socket peer's process (SO_PEERCRED).
void IdentifyPeer(int fd, Connection& c);

// A complete answer with a JSON error body (errors.h) and Connection: close,
// for the answers the guard sends itself.
std::string ErrorResponse(int http_status, const absl::Status& status);
// Best effort, never blocking: what fits in the socket buffer (the guard's
// answers are small).
void SendNow(int fd, const std::string& bytes);

struct StreamLimits {
  int64_t body_deadline_ns = 0;  // monotonic
  int read_timeout_ms = 30'000;
  int write_timeout_ms = 120'000;
};

// The stream of one request (Threads: the worker serving it). Reads give
// the head the guard parsed, then the body: exactly Content-Length bytes,
// or a chunked body until it passes the route's limit (plus framing), then
// EOF; what comes after stays in Connection::buf for the next request. A
// read that would pass the body's deadline or limit fails and records why;
// from then on writes fail too, so that cpp-httplib's own error answer is
// not sent and the server sends the right one (408, 413).
class ConnectionStream final : public httplib::Stream {
 public:
  enum class Failure { kNone, kBodyDeadline, kBodyTooLarge, kStopped, kClosed };

  ConnectionStream(Connection& c, StreamLimits limits, int stop_fd);
  ~ConnectionStream() override;  // leaves the unread bytes in Connection::buf

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return c_.fd.get(); }

  Failure failure() const { return failure_; }
  // Whether the body was read to its end (a chunked one cannot be told:
  // false), so the connection can carry another request.
  bool body_consumed() const;

 private:
  // Waits for the socket (and the stop fd) up to the read timeout and the
  // body deadline; false with failure_ set when it did not become readable.
  bool WaitReadable();

  Connection& c_;
  const StreamLimits limits_;
  const int stop_fd_;
  size_t pos_ = 0;       // in c_.buf
  uint64_t consumed_ = 0;  // bytes given to httplib, head included
  uint64_t allowance_ = 0;  // head + the most body bytes this request may have
  Failure failure_ = Failure::kNone;
};

}  // namespace dsec::daemon

// SPDX-License-Identifier: Apache-2.0
// Host side of the agent protocol: one Client per connection to a
// dsec-agent (through the monitor's vsock unix socket, or a plain unix socket
// to a host-mode agent). Every wait has a deadline; nothing sleeps.
//
// A request that the agent refuses (ERROR reply) returns its status and the
// client stays usable. A protocol violation, an I/O error or a timeout in
// the middle of a reply leaves the stream out of step: the client is then
// broken() and every further call fails with FailedPrecondition.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "guest-kernel/agent/frame_conn.h"
#include "guest-kernel/agent/messages.h"
#include "guest-kernel/agent/pack_diff_stream.h"
#include "base/clock.h"
#include "base/scoped_fd.h"

namespace dsec::agent {

struct ClientOptions {
  // Bound on each wait for the agent outside of exec output: the handshake,
  // every frame of a file reply or pack_diff stream, a blocked write.
  int64_t io_timeout_ms = 30'000;
  // An exec's frames are awaited until its timeout_ms plus this much (the
  // agent needs a moment to kill and report).
  int64_t exec_grace_ms = 30'000;
  // Bound for an exec without timeout_ms.
  int64_t untimed_exec_wait_ms = 24ll * 3600 * 1000;
  // The clock those two bounds are counted on (not owned; it must outlive
  // the client); CLOCK_MONOTONIC when null. A microVM's PausableClock,
  // which stands still while the guest is paused, as the guest's own
  // clock does: a pause does not use up a command's time.
  const Clock* exec_clock = nullptr;
};

// stream: 1 stdout, 2 stderr.
using OutputCallback = std::function<void(int stream, std::string_view data)>;

struct ExecEvent {
  enum class Kind { kOutput, kDone };
  Kind kind = Kind::kOutput;
  int stream = 0;    // kOutput
  std::string data;  // kOutput
  ExecDone done;     // kDone
};

class Client;

// A running command started with Client::StartExec. Borrows the client,
// which must outlive it and runs nothing else until the command is done.
// Threads: the client's thread.
class ExecStream {
 public:
  ~ExecStream();
  int64_t pid() const { return pid_; }
  // Sends stdin bytes (request.stdin must have been true). Output that
  // arrives meanwhile is kept for Next().
  absl::Status WriteStdin(std::string_view data);
  absl::Status CloseStdin();
  // `sig` (1..64) to the command's process group; SIGKILL ends it as its
  // timeout would. Nothing once the command has ended.
  absl::Status Signal(int sig);
  // The next output chunk or the end. DeadlineExceeded if nothing arrives
  // within timeout_ms (the stream stays usable).
  absl::StatusOr<ExecEvent> Next(int64_t timeout_ms);
  // Reads to the end, handing output to on_chunk (may be empty).
  absl::StatusOr<ExecDone> Wait(const OutputCallback& on_chunk);

 private:
  friend class Client;
  ExecStream(Client* client, int64_t pid, int64_t deadline_ns)
      : client_(client), pid_(pid), deadline_ns_(deadline_ns) {}

  Client* const client_;
  const int64_t pid_;
  const int64_t deadline_ns_;
  bool done_ = false;
};

// Threads: one thread at a time.
class Client {
 public:
  // Takes a connected stream socket and performs the HELLO handshake.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ScopedFd fd, ClientOptions options = {});

  // The agent's HELLO (version, capabilities, frame limit).
  const Hello& agent_hello() const { return agent_hello_; }
  bool broken() const { return broken_; }

  // Runs a command to the end. Output chunks go to on_chunk as they arrive.
  // With request.stdin, `stdin_data` is sent and stdin closed; without it,
  // stdin_data must be empty.
  absl::StatusOr<ExecDone> Exec(const ExecRequest& request, const OutputCallback& on_chunk,
                                std::string_view stdin_data = {});
  // Starts a command and returns once the agent reports it running.
  absl::StatusOr<std::unique_ptr<ExecStream>> StartExec(const ExecRequest& request);

  // Reads up to max_bytes of a regular file (paths resolve inside the
  // agent's root). `info` receives size and truncation.
  absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes,
                                       FileReadDone* info = nullptr);
  // Creates or truncates the file and writes `data`; mode is set exactly.
  absl::Status WriteFile(const std::string& path, std::string_view data, uint32_t mode = 0644);
  // Entries of a directory, sorted by name, without "." and "..".
  absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& path);
  // WATCH: the connection becomes a watch of request.path (nothing else
  // runs on it from then on); the directories watched at the start.
  absl::StatusOr<uint64_t> Watch(const WatchRequest& request);
  // The watch's changes that came (every WATCH_EVENTS frame already here,
  // at most 16,384 events), waiting up to timeout_ms (< 0: without limit)
  // for the first: empty when none came in time. The agent's ERROR
  // ends the watch with its code (NOT_FOUND: the directory went;
  // RESOURCE_EXHAUSTED: events lost or too many directories); a closed
  // connection is Unavailable.
  absl::StatusOr<std::vector<FileEvent>> NextWatchEvents(int64_t timeout_ms);
  // Streams the agent's upper directory into `dest_dir` (existing, empty).
  absl::StatusOr<DiffStats> PackDiff(const std::string& dest_dir,
                                     const MaterializeOptions& options = {});
  // Re-addresses the guest's eth0 ("<address>/<prefix>,<gateway>", as
  // dsec.net): a guest restored from another sandbox's saved machine.
  absl::Status ConfigureNetwork(const std::string& net);
  // CLOCK: sets the guest's wall clock to `unix_ns` (a restored machine).
  absl::Status SetClock(int64_t unix_ns);
  // ENTROPY: credits `seed` to the guest's input pool and reseeds its CRNG
  // (a restored machine, whose clones share one CRNG state).
  absl::Status Reseed(const std::string& seed);
  // Any thread: shuts the connection down both ways, so that a call under
  // way on another thread fails at once and the client is broken; the
  // agent kills the command it ran for this connection (a disconnect).
  void Interrupt() { conn_.Shutdown(SHUT_RDWR); }
  // Asks the agent to stop (guest: sync and power off; host mode: exit),
  // waits for its acknowledgement and closes the connection.
  absl::Status Shutdown();

 private:
  friend class ExecStream;
  friend class ClientFrameSource;
  Client(FrameConn conn, ClientOptions options) : conn_(std::move(conn)), options_(options) {}

  absl::Status Usable() const;
  // Marks the client broken for errors that leave the stream out of step.
  absl::Status Break(absl::Status status);
  absl::Status Send(const Frame& frame);
  absl::StatusOr<Frame> Receive(int64_t deadline_ns);
  // An ERROR reply as a status (client stays usable), or Break() for an
  // unexpected frame.
  absl::Status Unexpected(const Frame& frame, MsgType wanted);
  int64_t IoDeadline() const { return DeadlineAfterMs(options_.io_timeout_ms); }
  // The exec bounds' clock (ClientOptions::exec_clock).
  int64_t ExecClockNs() const;
  // `ms` from now on the exec clock.
  int64_t ExecDeadlineAfterMs(int64_t ms) const;
  // A deadline on the exec clock as a CLOCK_MONOTONIC one, if that clock
  // runs on from now (at least 100 ms from now, with an exec clock).
  int64_t ExecDeadlineAsMonotonic(int64_t exec_deadline_ns) const;

  FrameConn conn_;
  const ClientOptions options_;
  Hello agent_hello_;
  bool broken_ = false;
  bool exec_running_ = false;
  bool watching_ = false;
  absl::Status watch_end_;  // a watch's end read behind its last events, for the next call
};

// Connects to a unix socket (blocking connect bounded by timeout_ms).
absl::StatusOr<ScopedFd> ConnectUnix(const std::string& path, int64_t timeout_ms);

// Connects through the monitor's vsock socket (devices/vsock/README.md):
// connects to `socket_path`, sends "CONNECT <port>\n", expects a line that
// starts with "OK ". Returns the socket, positioned at the stream's start.
absl::StatusOr<ScopedFd> ConnectVsockUnix(const std::string& socket_path, uint32_t port,
                                          int64_t timeout_ms = 10'000);
// ConnectVsockUnix + Client::Connect.
absl::StatusOr<std::unique_ptr<Client>> ConnectVsock(const std::string& socket_path, uint32_t port,
                                                     ClientOptions options = {});

}  // namespace dsec::agent

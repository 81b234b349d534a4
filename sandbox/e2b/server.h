// SPDX-License-Identifier: Apache-2.0
// The E2B-compatible API of one node: E2B's control plane (create, get,
// list, kill, timeout, connect, pause/resume) and envd's data plane (the
// Connect-RPC process and filesystem services, GET/POST /files) on one TCP
// listener, over the node daemon's Service, so that E2B's SDKs run
// unmodified against dsec-vmm (docs/e2b.md says what is and is not there).
//
// A layer over the node API, not inside a tier: every operation goes
// through daemon::Service (its validation, limits, output caps, timeouts,
// QoS and trajectory log), as a request of the node API would; a cluster
// gateway can serve the same API over many nodes' APIs later.
//
// Routing: a request carrying `E2b-Sandbox-Id` (the SDK sends it on every
// envd call when pointed at one URL: E2B_SANDBOX_URL / sandboxUrl), or
// whose Host is `<port>-<sandboxID>.<domain>`, is for that sandbox's envd
// and must carry the sandbox's access token (X-Access-Token); any other
// is for the control plane and must carry a configured X-API-KEY.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/daemon/daemon.h"
#include "sandbox/daemon/service.h"
#include "sandbox/e2b/templates.h"
#include "sandbox/e2b/wire.h"

namespace dsec::e2b {

struct E2bOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (port())
  // X-API-KEY values accepted (each compared in constant time); at least one.
  std::vector<std::string> api_keys;
  // Templates from flags, and a file re-read at each create (so that
  // `dsec-vmm template add` takes effect at once); the file's win.
  std::map<std::string, Template> templates;
  std::string templates_file;
  // E2B's default template ("base") when neither names it: the container
  // tier's default layers.
  std::string default_template = "base";
  // Longest sandbox timeout a client may ask (E2B's is 24 h on Pro).
  int64_t max_sandbox_timeout_s = 24 * 3600;
  // Longest command (E2B's timeoutMs 0 means none; here: this).
  int64_t max_command_timeout_s = 3600;
  std::string client_id = "dsec-vmm";
  size_t max_json_bytes = 1u << 20;
  size_t max_file_bytes = 64u << 20;
  uint32_t max_list_depth = 16;
  size_t max_list_entries = 100000;
  int threads = 32;
  // filesystem.WatchDir streams at once (each holds a thread while it
  // lasts); the polling watchers (CreateWatcher) hold none.
  int max_watch_streams = 8;
  int max_connections_per_client = 64;
  int max_connections = 1024;
};

// Threads: Start binds and starts the listener thread; handlers run on the
// server's pool; Stop (or the destructor) ends it. The Service outlives it.
class E2bServer final : public daemon::FrontEnd {
 public:
  static absl::StatusOr<std::unique_ptr<E2bServer>> Start(daemon::Service* service, E2bOptions options);
  ~E2bServer() override;
  void Stop() override;
  int port() const { return port_; }

  struct State;

 private:
  E2bServer() = default;
  std::shared_ptr<State> state_;
  std::thread thread_;
  int port_ = 0;
};

// Reads an API key file: one key per line, blank lines and #-comments
// skipped; at least one key of 16 or more characters.
absl::StatusOr<std::vector<std::string>> ReadApiKeyFile(const std::string& path);

}  // namespace dsec::e2b

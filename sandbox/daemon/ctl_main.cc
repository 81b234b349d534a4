// SPDX-License-Identifier: Apache-2.0
// dsec-vmmctl: a client of the node API (docs/api.yaml) for what the static
// dsec-vmm cannot send itself (cpp-httplib ships no static archive):
// `dsec-vmm sandbox fork|snapshot|snapshots|snapshot-rm ...` exec this
// binary beside it (cmd/sandbox_api_commands.cc).
//
//   dsec-vmmctl fork ID [--count N] [--ttl-s S]
//   dsec-vmmctl snapshot ID
//   dsec-vmmctl snapshots
//   dsec-vmmctl snapshot-rm SNAPSHOT_ID
//
// The daemon: --socket PATH (default /run/dsec-vmm/api.sock), or --url
// http://HOST:PORT with --token-file FILE. Prints the answer's JSON on
// stdout; exit 0 for a 2xx answer, 1 for an error answer (its message on
// stderr), 2 for bad arguments, 5 when the daemon did not answer.
#include <sys/socket.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "sandbox/daemon/http_server.h"

namespace {

using nlohmann::json;

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoAnswer = 5;

struct Target {
  std::string socket = dsec::daemon::kDefaultSocket;
  std::string url;
  std::string token_file;
};

std::unique_ptr<httplib::Client> Connect(const Target& t, std::string* error) {
  std::unique_ptr<httplib::Client> c;
  if (t.url.empty()) {
    c = std::make_unique<httplib::Client>(t.socket);
    c->set_address_family(AF_UNIX);
  } else {
    c = std::make_unique<httplib::Client>(t.url);
    if (!c->is_valid()) {
      *error = "--url " + t.url + ": not an http://HOST:PORT address";
      return nullptr;
    }
    std::ifstream in(t.token_file);
    std::string token;
    if (t.token_file.empty() || !std::getline(in, token) || token.empty()) {
      *error = "--url needs --token-file with the daemon's token on its first line";
      return nullptr;
    }
    c->set_bearer_token_auth(token);
  }
  c->set_read_timeout(600, 0);
  c->set_write_timeout(60, 0);
  return c;
}

int Report(const httplib::Result& r, const std::string& what) {
  if (!r) {
    std::fprintf(stderr, "dsec-vmmctl: %s: no answer from the daemon (%s)\n", what.c_str(),
                 httplib::to_string(r.error()).c_str());
    return kExitNoAnswer;
  }
  if (r->status >= 200 && r->status < 300) {
    if (!r->body.empty()) {
      json j = json::parse(r->body, nullptr, false);
      std::printf("%s\n", j.is_discarded() ? r->body.c_str() : j.dump(2).c_str());
    }
    return 0;
  }
  json j = json::parse(r->body, nullptr, false);
  std::string message = r->body;
  if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) {
    message = j["error"].value("message", r->body);
  }
  std::fprintf(stderr, "dsec-vmmctl: %s: %d %s\n", what.c_str(), r->status, message.c_str());
  return kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dsec-vmmctl: node API client (fork, snapshots); see docs/api.yaml"};
  app.require_subcommand(1);
  Target t;
  app.add_option("--socket", t.socket, "The daemon's unix socket")->capture_default_str();
  app.add_option("--url", t.url, "The daemon's TCP address instead (http://HOST:PORT)");
  app.add_option("--token-file", t.token_file, "Bearer token for --url (first line)");

  std::string id;
  int count = 1;
  int64_t ttl_s = 0;
  CLI::App* fork = app.add_subcommand("fork", "N new sandboxes from a sandbox's files (POST .../fork)");
  fork->add_option("id", id, "Sandbox id")->required();
  fork->add_option("--count", count, "How many (1..64)")->capture_default_str()->check(CLI::Range(1, 64));
  fork->add_option("--ttl-s", ttl_s, "Each child's lifetime in seconds (0: none)")->check(CLI::NonNegativeNumber);
  CLI::App* snapshot = app.add_subcommand("snapshot", "Keep a sandbox's files as a snapshot (POST .../snapshot)");
  snapshot->add_option("id", id, "Sandbox id")->required();
  CLI::App* list = app.add_subcommand("snapshots", "The node's snapshots (GET /v1/snapshots)");
  CLI::App* remove = app.add_subcommand("snapshot-rm", "Remove a snapshot (DELETE /v1/snapshots/ID)");
  remove->add_option("snapshot_id", id, "Snapshot id (snap-...)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  std::string error;
  std::unique_ptr<httplib::Client> c = Connect(t, &error);
  if (c == nullptr) {
    std::fprintf(stderr, "dsec-vmmctl: %s\n", error.c_str());
    return kExitUsage;
  }
  // Ids become path segments: only the characters ids are made of.
  for (char ch : id) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') {
      std::fprintf(stderr, "dsec-vmmctl: bad id \"%s\"\n", id.c_str());
      return kExitUsage;
    }
  }
  if (fork->parsed()) {
    json body = {{"count", count}};
    if (ttl_s > 0) body["ttl_s"] = ttl_s;
    return Report(c->Post("/v1/sandboxes/" + id + "/fork", body.dump(), "application/json"), "fork");
  }
  if (snapshot->parsed()) {
    return Report(c->Post("/v1/sandboxes/" + id + "/snapshot", "{}", "application/json"), "snapshot");
  }
  if (list->parsed()) return Report(c->Get("/v1/snapshots"), "snapshots");
  if (remove->parsed()) return Report(c->Delete("/v1/snapshots/" + id), "snapshot-rm");
  return kExitUsage;
}

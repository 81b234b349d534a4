// SPDX-License-Identifier: Apache-2.0
// The E2B API's place in dsec-vmmd (sandbox/daemon/front_end.h): its flags
// and its start. This file is compiled into the dsec-vmmd binary by this
// folder's CMakeLists.txt (the daemon cannot name a component above it).
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sandbox/daemon/front_end.h"
#include "sandbox/e2b/server.h"
#include "sandbox/e2b/templates.h"

namespace dsec::e2b {
namespace {

class E2bFrontEndSetup final : public daemon::FrontEndSetup {
 public:
  void AddFlags(CLI::App& app) override {
    app.add_option("--e2b-listen", listen_,
                   "Serve the E2B-compatible API (control plane and envd) on TCP HOST:PORT (docs/e2b.md); off "
                   "when not given");
    app.add_option("--e2b-api-key-file", key_file_,
                   "X-API-KEY values the E2B API accepts, one per line (needed with --e2b-listen)");
    app.add_option("--e2b-template", template_flags_,
                   "NAME=REF[,REF...]: an E2B templateID and its layers, bottom first (repeatable)");
    app.add_option("--e2b-templates", options_.templates_file,
                   "Template file, re-read at each create (`dsec-vmm template add`)")
        ->capture_default_str();
    app.add_option("--e2b-client-id", options_.client_id, "clientID in E2B answers")->capture_default_str();
  }

  absl::StatusOr<daemon::FrontEndStarter> Starter() override {
    if (listen_.empty()) return daemon::FrontEndStarter();
    const size_t colon = listen_.rfind(':');
    int port = -1;
    if (colon == std::string::npos || !absl::SimpleAtoi(listen_.substr(colon + 1), &port) || port < 0 ||
        port > 65535) {
      return absl::InvalidArgumentError("--e2b-listen wants HOST:PORT");
    }
    options_.host = listen_.substr(0, colon);
    options_.port = port;
    if (key_file_.empty()) return absl::InvalidArgumentError("--e2b-listen needs --e2b-api-key-file");
    auto keys = ReadApiKeyFile(key_file_);
    if (!keys.ok()) return absl::InvalidArgumentError(absl::StrCat("--e2b-api-key-file: ", keys.status().message()));
    options_.api_keys = *keys;
    for (const std::string& f : template_flags_) {
      auto t = ParseTemplateFlag(f);
      if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--e2b-template: ", t.status().message()));
      options_.templates[t->name] = *t;
    }
    if (auto file = ReadTemplateFile(options_.templates_file); !file.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--e2b-templates: ", file.status().message()));
    }
    E2bOptions o = options_;
    return daemon::FrontEndStarter([o](daemon::Service* svc) -> absl::StatusOr<std::unique_ptr<daemon::FrontEnd>> {
      auto s = E2bServer::Start(svc, o);
      if (!s.ok()) return s.status();
      // Ready line for supervisors and tests (the port when 0 was asked).
      printf("dsec-vmmd e2b ready port=%d\n", (*s)->port());
      fflush(stdout);
      return std::unique_ptr<daemon::FrontEnd>(std::move(*s));
    });
  }

 private:
  std::string listen_;
  std::string key_file_;
  std::vector<std::string> template_flags_;
  E2bOptions options_ = [] {
    E2bOptions o;
    o.templates_file = kDefaultTemplateFile;
    return o;
  }();
};

const daemon::FrontEndRegistration kRegistration(
    [] { return std::unique_ptr<daemon::FrontEndSetup>(new E2bFrontEndSetup()); });

}  // namespace
}  // namespace dsec::e2b

// SPDX-License-Identifier: Apache-2.0
// envd's process service (process.proto) over Connect with the JSON codec:
// Start runs the command through the node's streamed exec
// (daemon::StreamedExec: the Service's validation, output cap, timeout,
// QoS and trajectory, a bounded buffer that never waits for the client)
// and turns its NDJSON lines into Connect envelopes: a start event, data
// events as output comes, the end event, the end of the stream. List shows
// the commands streaming through this server. On a tier whose execs take
// an ExecControl (the container tier), each command has one: SendSignal
// reaches that command alone, SendInput and CloseStdin feed the stdin of
// one started with `stdin: true`, and commands run side by side. On
// others SendSignal ends the command that runs now (Service::KillExecs)
// and stdin is refused. Connect attaches one more client to a running
// command (command_feed.h). PTYs are unimplemented, named in the error
// (docs/e2b.md).
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sandbox/daemon/exec_stream.h"
#include "base/status.h"
#include "sandbox/daemon/http_parse.h"
#include "sandbox/e2b/connect.h"
#include "sandbox/e2b/server_internal.h"

namespace dsec::e2b {

using nlohmann::json;

constexpr const char* kConnectJson = kConnectJsonType;

bool ContentTypeIs(const httplib::Request& req, absl::string_view type) {
  const std::string ct = req.get_header_value("Content-Type");
  return absl::StartsWithIgnoreCase(ct, type) &&
         (ct.size() == type.size() || ct[type.size()] == ';' || ct[type.size()] == ' ');
}

void EndStreamNow(httplib::Response& res, const absl::Status& status) {
  res.status = 200;
  res.set_content(EndStreamEnvelope(status), kConnectJson);
}

absl::StatusOr<json> StreamRequest(const E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  if (!ContentTypeIs(req, kConnectJson)) {
    res.status = 415;  // the protocol's answer to a codec it does not offer
    res.set_header("Accept-Post", kConnectJson);
    return absl::InvalidArgumentError("unsupported content type");
  }
  auto env = ParseSingleEnvelope(req.body, st->options.max_json_bytes);
  if (!env.ok()) {
    EndStreamNow(res, env.status());
    return env.status();
  }
  auto body = daemon::ParseJsonBody(env->payload, st->options.max_json_bytes);
  if (!body.ok()) {
    EndStreamNow(res, absl::InvalidArgumentError(absl::StrCat("request message: ", body.status().message())));
    return body.status();
  }
  return body;
}

int64_t KeepaliveMs(const httplib::Request& req) {
  if (int64_t s = 0; absl::SimpleAtoi(req.get_header_value("Keepalive-Ping-Interval"), &s) && s > 0) {
    return std::min<int64_t>(s, 3600) * 1000;
  }
  return -1;
}

namespace {

// Streams `feed` to one attached client (`client`): the start event, data
// events as output comes, the end event, the end of the stream. A client
// that goes away detaches; the command runs on (the record holds it).
void StreamFeed(E2bServer::State* st, httplib::Response& res, std::shared_ptr<Record> rec, std::shared_ptr<CommandFeed> feed,
                int client, uint32_t pid, int64_t keepalive_ms) {
  struct Progress {
    bool started = false;
    bool ended = false;
  };
  auto progress = std::make_shared<Progress>();
  auto counted = std::make_shared<StreamCount>(&st->open_streams);
  // The command ended: its record entry goes (the feed stays with this
  // client until it has sent the end).
  auto sweep = [rec] {
    std::vector<std::shared_ptr<CommandFeed>> ended;
    std::lock_guard<std::mutex> lock(rec->mu);
    ended = rec->Sweep();
  };
  res.status = 200;
  res.set_chunked_content_provider(
      kConnectJson,
      [feed, client, progress, pid, keepalive_ms, sweep, counted](size_t, httplib::DataSink& sink) {
        if (progress->ended) {
          sink.done();
          return true;
        }
        std::string out;
        if (!progress->started) {
          progress->started = true;
          out = MessageEnvelope(json{{"event", {{"start", {{"pid", pid}}}}}});
        } else {
          std::string line;
          const CommandFeed::Next next = feed->NextLine(client, &line, keepalive_ms);
          if (next == CommandFeed::Next::kTimeout) {
            out = MessageEnvelope(json{{"event", {{"keepalive", json::object()}}}});
          } else if (next == CommandFeed::Next::kClosed) {
            out = EndStreamEnvelope(absl::UnavailableError("the E2B server is stopping"));
            progress->ended = true;
          } else if (next == CommandFeed::Next::kEnd) {
            out = EndStreamEnvelope(absl::InternalError("the exec ended without a result"));
            progress->ended = true;
          } else {
            json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
            if (auto data = DataEventOf(j); data.ok()) {
              out = MessageEnvelope(*data);
            } else {
              const ProcessEnd end = ProcessEndOf(j);
              out = end.status.ok() ? MessageEnvelope(end.end_event) + EndStreamEnvelope(absl::OkStatus())
                                    : EndStreamEnvelope(end.status);
              progress->ended = true;
              sweep();
            }
          }
        }
        if (!sink.write(out.data(), out.size())) {
          feed->Detach(client);  // the client is gone; the command runs to its end
          return false;
        }
        return true;
      },
      [feed, client, sweep](bool) {
        feed->Detach(client);
        sweep();
      });
}

void Start(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  const std::string id = EnvdSandboxOf(req);
  auto body = StreamRequest(st, req, res);
  if (!body.ok()) return;
  auto timeout_ms = ParseTimeoutMs(req.get_header_value("Connect-Timeout-Ms"));
  if (!timeout_ms.ok()) return EndStreamNow(res, timeout_ms.status());
  auto start = ParseStartRequest(*body);
  if (!start.ok()) return EndStreamNow(res, start.status());
  std::shared_ptr<Record> rec = st->Find(id);
  if (rec == nullptr) return EndStreamNow(res, absl::UnavailableError("the sandbox is gone"));
  const json exec = NodeExecBody(*start, rec->env_vars, *timeout_ms, st->options.max_command_timeout_s);
  std::shared_ptr<ExecControl> control;
  absl::StatusOr<bool> offered = st->svc->ExecControlOffered(id);
  if (!offered.ok()) return EndStreamNow(res, absl::UnavailableError("the sandbox is gone"));
  if (*offered) {
    absl::StatusOr<std::shared_ptr<ExecControl>> made = ExecControl::Create(start->stdin);
    if (!made.ok()) return EndStreamNow(res, made.status());
    control = *std::move(made);
  } else if (start->stdin) {
    return EndStreamNow(res, absl::UnimplementedError(
                                 "stdin: this sandbox takes a command's stdin only with its start (its tier, or "
                                 "a task's trajectory; not supported by dsec-vmm's E2B API)"));
  }
  std::shared_ptr<daemon::StreamedExec> stream = daemon::StreamedExec::Start(st->svc, id, exec, {}, control);
  if (absl::Status s = stream->WaitStarted(); !s.ok()) return EndStreamNow(res, s);
  auto feed = std::make_shared<CommandFeed>(std::move(stream));
  const int client = feed->Attach();
  uint32_t pid = 0;
  std::vector<std::shared_ptr<CommandFeed>> ended;
  {
    std::lock_guard<std::mutex> lock(rec->mu);
    ended = rec->Sweep();
    pid = rec->next_pid++;
    rec->running[pid] = *start;
    rec->feeds[pid] = feed;
    if (control) rec->controls[pid] = control;
  }
  if (st->stopping) feed->Close();  // CloseStreams may have missed it
  StreamFeed(st, res, rec, feed, client, pid, KeepaliveMs(req));
}

// commands.connect: one more client of a running command, from now on.
void Connect(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  const std::string id = EnvdSandboxOf(req);
  auto body = StreamRequest(st, req, res);
  if (!body.ok()) return;
  auto sel = ParseSelector(*body);
  if (!sel.ok()) return EndStreamNow(res, sel.status());
  std::shared_ptr<Record> rec = st->Find(id);
  if (rec == nullptr) return EndStreamNow(res, absl::UnavailableError("the sandbox is gone"));
  std::shared_ptr<CommandFeed> feed;
  uint32_t pid = 0;
  std::vector<std::shared_ptr<CommandFeed>> ended;
  {
    std::lock_guard<std::mutex> lock(rec->mu);
    ended = rec->Sweep();
    for (const auto& [p, r] : rec->running) {
      if (sel->pid ? p != *sel->pid : r.tag != sel->tag) continue;
      auto it = rec->feeds.find(p);
      if (it == rec->feeds.end()) continue;
      feed = it->second;
      pid = p;
      break;
    }
  }
  if (feed == nullptr) return EndStreamNow(res, absl::NotFoundError("no such process running"));
  const int client = feed->Attach();
  StreamFeed(st, res, rec, feed, client, pid, KeepaliveMs(req));
}

json ProcessInfoJson(uint32_t pid, const StartRequest& r) {
  json config = {{"cmd", r.cmd}, {"args", r.args}, {"envs", r.envs}};
  if (!r.cwd.empty()) config["cwd"] = r.cwd;
  json p = {{"config", config}, {"pid", pid}};
  if (r.tag) p["tag"] = *r.tag;
  return p;
}

}  // namespace

void ServeUnary(E2bServer::State* st, const httplib::Request& req, httplib::Response& res, const UnaryFn& fn) {
  auto fail = [&res](const absl::Status& s) {
    res.status = ConnectHttpStatus(s.code());
    res.set_content(ConnectErrorJson(s).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  };
  if (!ContentTypeIs(req, "application/json")) {
    res.status = 415;
    res.set_header("Accept-Post", "application/json");
    res.set_content(ConnectErrorJson(absl::InvalidArgumentError("only the JSON codec (application/json) is offered"))
                        .dump(),
                    "application/json");
    return;
  }
  auto body = daemon::ParseJsonBody(req.body, st->options.max_json_bytes);
  if (!body.ok()) return fail(body.status());
  auto r = fn(EnvdSandboxOf(req), *body);
  if (!r.ok()) return fail(r.status());
  res.status = 200;
  res.set_content(r->dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void AddProcessRoutes(httplib::Server& srv, E2bServer::State* st) {
  srv.Post("/process.Process/Start", [st](const httplib::Request& req, httplib::Response& res) { Start(st, req, res); });
  srv.Post("/process.Process/List", [st](const httplib::Request& req, httplib::Response& res) {
    ServeUnary(st, req, res, [st](const std::string& id, const json&) -> absl::StatusOr<json> {
      std::shared_ptr<Record> rec = st->Find(id);
      if (rec == nullptr) return absl::UnavailableError("the sandbox is gone");
      json list = json::array();
      std::vector<std::shared_ptr<CommandFeed>> ended;
      std::lock_guard<std::mutex> lock(rec->mu);
      ended = rec->Sweep();
      for (const auto& [pid, r] : rec->running) list.push_back(ProcessInfoJson(pid, r));
      return json{{"processes", list}};
    });
  });
  // commands.kill: the signal to that command's process group through its
  // control; its stream then ends with the signal. Without a control (a
  // tier that has none), SIGKILL or SIGTERM to the command whose exec runs
  // now ends it as the node's exec timeout does (every process the
  // sandbox's commands started, not its init: Service::KillExecs). A
  // command not running here is not_found; one still queued behind
  // another, or a tier that cannot, unimplemented.
  srv.Post("/process.Process/SendSignal", [st](const httplib::Request& req, httplib::Response& res) {
    ServeUnary(st, req, res, [st](const std::string& id, const json& body) -> absl::StatusOr<json> {
      DSEC_ASSIGN_OR_RETURN(Selector sel, ParseSelector(body));
      DSEC_ASSIGN_OR_RETURN(const int sig, ParseSignal(body));
      std::shared_ptr<Record> rec = st->Find(id);
      if (rec == nullptr) return absl::UnavailableError("the sandbox is gone");
      std::shared_ptr<CommandFeed> target;
      std::shared_ptr<ExecControl> control;
      std::vector<std::shared_ptr<CommandFeed>> ended;
      {
        std::lock_guard<std::mutex> lock(rec->mu);
        ended = rec->Sweep();
        bool known = false;
        for (const auto& [pid, r] : rec->running) {
          if (sel.pid ? pid != *sel.pid : r.tag != sel.tag) continue;
          known = true;
          auto it = rec->feeds.find(pid);
          if (it != rec->feeds.end()) target = it->second;
          auto c = rec->controls.find(pid);
          if (c != rec->controls.end()) control = c->second;
        }
        if (!known) return absl::NotFoundError("no such process running");
      }
      if (control != nullptr) {
        absl::Status s = control->Signal(sig);
        if (absl::IsFailedPrecondition(s)) return absl::NotFoundError("no such process running");
        DSEC_RETURN_IF_ERROR(s);
        return json::object();
      }
      if (target == nullptr || target->ended()) {
        return absl::UnimplementedError(
            "/process.Process/SendSignal: only the command running now can be signalled (this one has "
            "ended or waits behind another)");
      }
      DSEC_RETURN_IF_ERROR(st->svc->KillExecs(id));
      return json::object();
    });
  });
  // sendStdin / closeStdin: through the command's control. One started
  // without `stdin: true` has its stdin closed: failed_precondition.
  auto control_of = [st](const std::string& id, const json& body) -> absl::StatusOr<std::shared_ptr<ExecControl>> {
    DSEC_ASSIGN_OR_RETURN(Selector sel, ParseSelector(body));
    std::shared_ptr<Record> rec = st->Find(id);
    if (rec == nullptr) return absl::UnavailableError("the sandbox is gone");
    std::lock_guard<std::mutex> lock(rec->mu);
    bool known = false;
    for (const auto& [pid, r] : rec->running) {
      if (sel.pid ? pid != *sel.pid : r.tag != sel.tag) continue;
      known = true;
      auto c = rec->controls.find(pid);
      if (c != rec->controls.end()) return c->second;
    }
    if (!known) return absl::NotFoundError("no such process running");
    return absl::UnimplementedError(
        "stdin: this sandbox takes a command's stdin only with its start (not supported by dsec-vmm's E2B API)");
  };
  srv.Post("/process.Process/SendInput", [st, control_of](const httplib::Request& req, httplib::Response& res) {
    ServeUnary(st, req, res, [control_of](const std::string& id, const json& body) -> absl::StatusOr<json> {
      DSEC_ASSIGN_OR_RETURN(std::string bytes, ParseStdinInput(body));
      DSEC_ASSIGN_OR_RETURN(std::shared_ptr<ExecControl> control, control_of(id, body));
      DSEC_RETURN_IF_ERROR(control->WriteStdin(bytes));
      return json::object();
    });
  });
  srv.Post("/process.Process/CloseStdin", [st, control_of](const httplib::Request& req, httplib::Response& res) {
    ServeUnary(st, req, res, [control_of](const std::string& id, const json& body) -> absl::StatusOr<json> {
      DSEC_ASSIGN_OR_RETURN(std::shared_ptr<ExecControl> control, control_of(id, body));
      absl::Status s = control->CloseStdin();
      if (absl::IsFailedPrecondition(s)) return absl::NotFoundError("no such process running");
      DSEC_RETURN_IF_ERROR(s);
      return json::object();
    });
  });
  const std::pair<const char*, const char*> kUnary[] = {
      {"/process.Process/Update", "resizing a PTY"},
      {"/process.Process/StreamInput", "streamed input to a running command"},
  };
  for (const auto& [path, what] : kUnary) {
    const std::string p = path, w = what;
    srv.Post(p, [st, p, w](const httplib::Request& req, httplib::Response& res) {
      ServeUnary(st, req, res, [st, p, w](const std::string& id, const json& body) -> absl::StatusOr<json> {
        // A command not running here is not_found (the SDK's kill()
        // answers false for it); one that is cannot be reached.
        if (auto sel = ParseSelector(body); sel.ok()) {
          std::shared_ptr<Record> rec = st->Find(id);
          if (rec == nullptr) return absl::UnavailableError("the sandbox is gone");
          std::lock_guard<std::mutex> lock(rec->mu);
          bool running = false;
          for (const auto& [pid, r] : rec->running) running |= sel->pid ? pid == *sel->pid : r.tag == sel->tag;
          if (!running) return absl::NotFoundError("no such process running");
        }
        return absl::UnimplementedError(absl::StrCat(p, ": ", w, " is not supported by dsec-vmm's E2B API"));
      });
    });
  }
  srv.Post("/process.Process/Connect", [st](const httplib::Request& req, httplib::Response& res) {
    Connect(st, req, res);
  });
}

}  // namespace dsec::e2b

// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/messages.h"

#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/json_util.h"

namespace dsec::agent {

namespace {

using internal::BytesToJson;
using internal::DecodeWith;
using internal::Fields;
using internal::JsonFrame;
using internal::WrongType;
using json = nlohmann::json;

constexpr std::pair<EntryType, const char*> kEntryTypes[] = {
    {EntryType::kFile, "file"},
    {EntryType::kDir, "dir"},
    {EntryType::kSymlink, "symlink"},
    {EntryType::kOther, "other"},
};

constexpr std::pair<DiffType, const char*> kDiffTypes[] = {
    {DiffType::kFile, "file"},         {DiffType::kDir, "dir"},
    {DiffType::kSymlink, "symlink"},   {DiffType::kHardlink, "hardlink"},
    {DiffType::kCharDev, "char"},      {DiffType::kBlockDev, "block"},
    {DiffType::kFifo, "fifo"},         {DiffType::kSocket, "socket"},
    {DiffType::kWhiteout, "whiteout"},
};

}  // namespace

const char* EntryTypeName(EntryType type) {
  for (const auto& [t, name] : kEntryTypes) {
    if (t == type) return name;
  }
  return "other";
}

const char* DiffTypeName(DiffType type) {
  for (const auto& [t, name] : kDiffTypes) {
    if (t == type) return name;
  }
  return "?";
}

ErrorMsg ErrorFromStatus(const absl::Status& status) {
  ErrorMsg e;
  e.code = status.code();
  e.message = std::string(status.message());
  return e;
}

absl::Status StatusFromError(const ErrorMsg& error) {
  absl::StatusCode code =
      error.code == absl::StatusCode::kOk ? absl::StatusCode::kUnknown : error.code;
  return absl::Status(code, absl::StrCat("agent: ", error.message));
}

// --- Encoders -------------------------------------------------------------

Frame ToFrame(const Hello& m) {
  json j = {{"version", m.version},
            {"software", m.software},
            {"capabilities", m.capabilities},
            {"max_frame_bytes", m.max_frame_bytes}};
  return JsonFrame(MsgType::kHello, j);
}

Frame ToFrame(const ErrorMsg& m) {
  json j = {{"code", absl::StatusCodeToString(m.code)},
            {"message", m.message}};  // invalid UTF-8 is replaced by dump()
  return JsonFrame(MsgType::kError, j);
}

Frame ToFrame(const ExecRequest& m) {
  json argv = json::array();
  for (const std::string& a : m.argv) argv.push_back(BytesToJson(a));
  json env = json::object();
  for (const auto& [k, v] : m.env) env[k] = BytesToJson(v);
  json j = {{"argv", std::move(argv)},
            {"env", std::move(env)},
            {"cwd", BytesToJson(m.cwd)},
            {"timeout_ms", m.timeout_ms},
            {"output_cap_bytes", m.output_cap_bytes},
            {"output_rate_bytes_per_s", m.output_rate_bytes_per_s},
            {"kill_after_dropped_bytes", m.kill_after_dropped_bytes},
            {"stdin", m.stdin}};
  return JsonFrame(MsgType::kExec, j);
}

Frame ToFrame(const ExecStarted& m) { return JsonFrame(MsgType::kExecStarted, {{"pid", m.pid}}); }

Frame ToFrame(const OutputChunk& m) {
  Frame f;
  f.type = MsgType::kOutput;
  f.payload.reserve(1 + m.data.size());
  f.payload.push_back(static_cast<char>(m.stream));
  f.payload.append(m.data);
  return f;
}

Frame ToFrame(const ExecDone& m) {
  json j = {{"exit_code", m.exit_code ? json(*m.exit_code) : json(nullptr)},
            {"signal", m.signal ? json(*m.signal) : json(nullptr)},
            {"timed_out", m.timed_out},
            {"killed_by", m.killed_by},
            {"stdout_bytes", m.stdout_bytes},
            {"stderr_bytes", m.stderr_bytes},
            {"stdout_dropped", m.stdout_dropped},
            {"stderr_dropped", m.stderr_dropped},
            {"duration_ms", m.duration_ms},
            {"peak_rss_kib", m.peak_rss_kib}};
  return JsonFrame(MsgType::kExecDone, j);
}

Frame ToFrame(const FileReadRequest& m) {
  return JsonFrame(MsgType::kFileRead, {{"path", BytesToJson(m.path)}, {"max_bytes", m.max_bytes}});
}

Frame ToFrame(const FileReadDone& m) {
  return JsonFrame(MsgType::kFileReadDone,
                   {{"size", m.size}, {"bytes", m.bytes}, {"truncated", m.truncated}});
}

Frame ToFrame(const FileWriteRequest& m) {
  return JsonFrame(MsgType::kFileWrite,
                   {{"path", BytesToJson(m.path)}, {"mode", m.mode}, {"size", m.size}});
}

Frame ToFrame(const FileWriteDone& m) {
  return JsonFrame(MsgType::kFileWriteDone, {{"bytes", m.bytes}});
}

Frame ToFrame(const NetworkRequest& m) {
  return JsonFrame(MsgType::kNetwork, {{"net", m.net}});
}

Frame ToFrame(const ClockRequest& m) {
  return JsonFrame(MsgType::kClock, {{"unix_ns", m.unix_ns}});
}

Frame ToFrame(const EntropyRequest& m) {
  return JsonFrame(MsgType::kEntropy, {{"seed", Base64Encode(m.seed)}});
}

Frame ToFrame(const SignalRequest& m) {
  return JsonFrame(MsgType::kSignal, {{"signal", m.signal}});
}

Frame ToFrame(const ListDirRequest& m) {
  return JsonFrame(MsgType::kListDir, {{"path", BytesToJson(m.path)}});
}

Frame ToFrame(const DirEntries& m) {
  json entries = json::array();
  for (const DirEntry& e : m.entries) {
    entries.push_back({{"name", BytesToJson(e.name)},
                       {"type", EntryTypeName(e.type)},
                       {"size", e.size},
                       {"mode", e.mode}});
  }
  return JsonFrame(MsgType::kDirEntries, {{"entries", std::move(entries)}, {"last", m.last}});
}

Frame ToFrame(const WatchRequest& m) {
  return JsonFrame(MsgType::kWatch,
                   {{"path", BytesToJson(m.path)}, {"recursive", m.recursive}, {"max_dirs", m.max_dirs}});
}

Frame ToFrame(const WatchStarted& m) { return JsonFrame(MsgType::kWatchStarted, {{"dirs", m.dirs}}); }

Frame ToFrame(const WatchEvents& m) {
  json events = json::array();
  for (const FileEvent& e : m.events) {
    events.push_back({{"name", BytesToJson(e.name)}, {"type", FileEventTypeName(e.type)}});
  }
  return JsonFrame(MsgType::kWatchEvents, {{"events", std::move(events)}});
}

Frame ToFrame(const DiffEntry& m) {
  json xattrs = json::array();
  for (const Xattr& x : m.xattrs) {
    xattrs.push_back({{"name", BytesToJson(x.name)}, {"value", Base64Encode(x.value)}});
  }
  json j = {{"path", BytesToJson(m.path)},
            {"type", DiffTypeName(m.type)},
            {"mode", m.mode},
            {"uid", m.uid},
            {"gid", m.gid},
            {"mtime_ns", m.mtime_ns},
            {"atime_ns", m.atime_ns},
            {"xattrs", std::move(xattrs)}};
  if (m.type == DiffType::kFile) j["size"] = m.size;
  if (m.type == DiffType::kCharDev || m.type == DiffType::kBlockDev) {
    j["rdev_major"] = m.rdev_major;
    j["rdev_minor"] = m.rdev_minor;
  }
  if (m.type == DiffType::kSymlink) j["target"] = BytesToJson(m.target);
  if (m.type == DiffType::kHardlink) j["link"] = BytesToJson(m.link);
  if (m.type == DiffType::kDir) j["opaque"] = m.opaque;
  return JsonFrame(MsgType::kDiffEntry, j);
}

Frame ToFrame(const DiffEnd& m) {
  return JsonFrame(MsgType::kDiffEnd, {{"entries", m.entries}, {"data_bytes", m.data_bytes}});
}

Frame EmptyFrame(MsgType type) {
  Frame f;
  f.type = type;
  f.payload = "{}";
  return f;
}

Frame DataFrame(MsgType type, std::string_view bytes) {
  Frame f;
  f.type = type;
  f.payload.assign(bytes.data(), bytes.size());
  return f;
}

// --- Decoders -------------------------------------------------------------

absl::Status FromFrame(const Frame& f, Hello* m) {
  return DecodeWith(f, MsgType::kHello, [&](Fields& r) {
    m->version = r.U32("version", 0, /*required=*/true);
    m->software = r.Str("software");
    m->capabilities.clear();
    if (const json* caps = r.Array("capabilities")) {
      for (const json& c : *caps) {
        if (!c.is_string()) {
          r.Fail("capabilities", "must hold strings");
          break;
        }
        m->capabilities.push_back(c.get<std::string>());
      }
    }
    m->max_frame_bytes = r.U32("max_frame_bytes", kMaxFramePayload);
  });
}

absl::Status FromFrame(const Frame& f, ErrorMsg* m) {
  return DecodeWith(f, MsgType::kError, [&](Fields& r) {
    std::string code = r.Str("code", /*required=*/true);
    m->code = absl::StatusCode::kUnknown;
    for (int c = 1; c <= 16; ++c) {
      if (absl::StatusCodeToString(static_cast<absl::StatusCode>(c)) == code) {
        m->code = static_cast<absl::StatusCode>(c);
      }
    }
    m->message = r.Str("message");
  });
}

absl::Status FromFrame(const Frame& f, ExecRequest* m) {
  return DecodeWith(f, MsgType::kExec, [&](Fields& r) {
    m->argv.clear();
    if (const json* argv = r.Array("argv", /*required=*/true)) {
      for (const json& a : *argv) m->argv.push_back(r.BytesOf(a, "argv"));
    }
    m->env.clear();
    if (const json* env = r.Find("env", false)) {
      if (!env->is_object()) {
        r.Fail("env", "must be an object");
      } else {
        for (const auto& [k, v] : env->items()) m->env[k] = r.BytesOf(v, "env");
      }
    }
    m->cwd = r.Bytes("cwd");
    m->timeout_ms = r.U64("timeout_ms", 0);
    m->output_cap_bytes = r.U64("output_cap_bytes", kDefaultOutputCapBytes);
    m->output_rate_bytes_per_s = r.U64("output_rate_bytes_per_s", 0);
    m->kill_after_dropped_bytes = r.U64("kill_after_dropped_bytes", kDefaultKillAfterDroppedBytes);
    m->stdin = r.Bool("stdin", false);
  });
}

absl::Status FromFrame(const Frame& f, ExecStarted* m) {
  return DecodeWith(f, MsgType::kExecStarted,
                    [&](Fields& r) { m->pid = r.I64("pid", 0, /*required=*/true); });
}

absl::Status FromFrame(const Frame& f, OutputChunk* m) {
  if (f.type != MsgType::kOutput) return WrongType(f, MsgType::kOutput);
  if (f.payload.empty() || (f.payload[0] != 1 && f.payload[0] != 2)) {
    return absl::InvalidArgumentError("protocol: OUTPUT must start with stream 1 or 2");
  }
  m->stream = f.payload[0];
  m->data = f.payload.substr(1);
  return absl::OkStatus();
}

absl::Status FromFrame(const Frame& f, ExecDone* m) {
  return DecodeWith(f, MsgType::kExecDone, [&](Fields& r) {
    m->exit_code = r.OptInt("exit_code");
    m->signal = r.OptInt("signal");
    if (m->exit_code.has_value() == m->signal.has_value()) {
      r.Fail("exit_code", "exactly one of exit_code and signal must be set");
    }
    m->timed_out = r.Bool("timed_out", false);
    m->killed_by = r.Str("killed_by");
    if (m->killed_by != "" && m->killed_by != "timeout" && m->killed_by != "output") {
      r.Fail("killed_by", "must be \"\", \"timeout\" or \"output\"");
    }
    m->stdout_bytes = r.U64("stdout_bytes", 0);
    m->stderr_bytes = r.U64("stderr_bytes", 0);
    m->stdout_dropped = r.U64("stdout_dropped", 0);
    m->stderr_dropped = r.U64("stderr_dropped", 0);
    m->duration_ms = r.I64("duration_ms", 0);
    m->peak_rss_kib = r.I64("peak_rss_kib", 0);
  });
}

absl::Status FromFrame(const Frame& f, FileReadRequest* m) {
  return DecodeWith(f, MsgType::kFileRead, [&](Fields& r) {
    m->path = r.Bytes("path", /*required=*/true);
    m->max_bytes = r.U64("max_bytes", 0, /*required=*/true);
  });
}

absl::Status FromFrame(const Frame& f, FileReadDone* m) {
  return DecodeWith(f, MsgType::kFileReadDone, [&](Fields& r) {
    m->size = r.U64("size", 0);
    m->bytes = r.U64("bytes", 0, /*required=*/true);
    m->truncated = r.Bool("truncated", false);
  });
}

absl::Status FromFrame(const Frame& f, FileWriteRequest* m) {
  return DecodeWith(f, MsgType::kFileWrite, [&](Fields& r) {
    m->path = r.Bytes("path", /*required=*/true);
    m->mode = r.U32("mode", 0644, false, 07777);
    m->size = r.U64("size", 0, /*required=*/true);
  });
}

absl::Status FromFrame(const Frame& f, FileWriteDone* m) {
  return DecodeWith(f, MsgType::kFileWriteDone,
                    [&](Fields& r) { m->bytes = r.U64("bytes", 0, /*required=*/true); });
}

absl::Status FromFrame(const Frame& f, NetworkRequest* m) {
  return DecodeWith(f, MsgType::kNetwork, [&](Fields& r) { m->net = r.Str("net", /*required=*/true); });
}

absl::Status FromFrame(const Frame& f, ClockRequest* m) {
  absl::Status s = DecodeWith(f, MsgType::kClock, [&](Fields& r) { m->unix_ns = r.I64("unix_ns", 0, /*required=*/true); });
  if (!s.ok()) return s;
  // From 2001 to 2200: a value outside is no wall clock.
  if (m->unix_ns < 978'307'200'000'000'000LL || m->unix_ns > 7'258'118'400'000'000'000LL) {
    return absl::InvalidArgumentError("CLOCK: unix_ns is not a plausible wall clock (2001..2200)");
  }
  return absl::OkStatus();
}

absl::Status FromFrame(const Frame& f, EntropyRequest* m) {
  return DecodeWith(f, MsgType::kEntropy, [&](Fields& r) {
    const std::string text = r.Str("seed", /*required=*/true);
    if (!r.status().ok()) return;
    absl::StatusOr<std::string> seed = Base64Decode(text);
    if (!seed.ok()) return r.Fail("seed", std::string(seed.status().message()));
    if (seed->size() < kMinEntropySeedBytes || seed->size() > kMaxEntropySeedBytes) {
      return r.Fail("seed", absl::StrCat("must hold ", kMinEntropySeedBytes, "..", kMaxEntropySeedBytes, " bytes"));
    }
    m->seed = *std::move(seed);
  });
}

absl::Status FromFrame(const Frame& f, SignalRequest* m) {
  absl::Status s = DecodeWith(f, MsgType::kSignal, [&](Fields& r) {
    m->signal = static_cast<int>(r.U32("signal", 0, /*required=*/true, 64));
  });
  if (s.ok() && m->signal < 1) return absl::InvalidArgumentError("protocol: SIGNAL: signal must be in [1, 64]");
  return s;
}

absl::Status FromFrame(const Frame& f, ListDirRequest* m) {
  return DecodeWith(f, MsgType::kListDir,
                    [&](Fields& r) { m->path = r.Bytes("path", /*required=*/true); });
}

absl::Status FromFrame(const Frame& f, DirEntries* m) {
  return DecodeWith(f, MsgType::kDirEntries, [&](Fields& r) {
    m->entries.clear();
    if (const json* entries = r.Array("entries", /*required=*/true)) {
      for (const json& e : *entries) {
        if (!e.is_object()) {
          r.Fail("entries", "must hold objects");
          break;
        }
        Fields er(e, MsgType::kDirEntries);
        DirEntry d;
        d.name = er.Bytes("name", true);
        std::string type = er.Str("type", true);
        bool known = false;
        for (const auto& [t, name] : kEntryTypes) {
          if (type == name) {
            d.type = t;
            known = true;
          }
        }
        if (!known) er.Fail("type", "unknown entry type");
        d.size = er.U64("size", 0);
        d.mode = er.U32("mode", 0, false, 07777);
        if (!er.status().ok()) {
          r.Fail("entries", std::string(er.status().message()));
          break;
        }
        m->entries.push_back(std::move(d));
      }
    }
    m->last = r.Bool("last", true);
  });
}

absl::Status FromFrame(const Frame& f, WatchRequest* m) {
  return DecodeWith(f, MsgType::kWatch, [&](Fields& r) {
    m->path = r.Bytes("path", /*required=*/true);
    m->recursive = r.Bool("recursive", false);
    m->max_dirs = r.U32("max_dirs", 1024, false, kMaxWatchDirs);
    if (m->max_dirs == 0) r.Fail("max_dirs", "must be at least 1");
  });
}

absl::Status FromFrame(const Frame& f, WatchStarted* m) {
  return DecodeWith(f, MsgType::kWatchStarted, [&](Fields& r) { m->dirs = r.U64("dirs", 0); });
}

absl::Status FromFrame(const Frame& f, WatchEvents* m) {
  return DecodeWith(f, MsgType::kWatchEvents, [&](Fields& r) {
    m->events.clear();
    const json* events = r.Array("events", /*required=*/true);
    if (events == nullptr) return;
    for (const json& e : *events) {
      if (!e.is_object()) {
        r.Fail("events", "must hold objects");
        return;
      }
      Fields er(e, MsgType::kWatchEvents);
      FileEvent ev;
      ev.name = er.Bytes("name", true);
      const std::string type = er.Str("type", true);
      if (std::optional<FileEvent::Type> t = FileEventTypeFromName(type)) {
        ev.type = *t;
      } else {
        er.Fail("type", "unknown change type");
      }
      if (!er.status().ok()) {
        r.Fail("events", std::string(er.status().message()));
        return;
      }
      m->events.push_back(std::move(ev));
    }
  });
}

absl::Status FromFrame(const Frame& f, DiffEntry* m) {
  return DecodeWith(f, MsgType::kDiffEntry, [&](Fields& r) {
    m->path = r.Bytes("path", /*required=*/true);
    std::string type = r.Str("type", /*required=*/true);
    bool known = false;
    for (const auto& [t, name] : kDiffTypes) {
      if (type == name) {
        m->type = t;
        known = true;
      }
    }
    if (!known) r.Fail("type", "unknown diff entry type");
    m->mode = r.U32("mode", 0, /*required=*/true, 07777);
    m->uid = r.U32("uid", 0);
    m->gid = r.U32("gid", 0);
    m->mtime_ns = r.I64("mtime_ns", 0);
    m->atime_ns = r.I64("atime_ns", 0);
    m->size = r.U64("size", 0);
    m->rdev_major = r.U32("rdev_major", 0);
    m->rdev_minor = r.U32("rdev_minor", 0);
    m->target = r.Bytes("target");
    m->link = r.Bytes("link");
    m->opaque = r.Bool("opaque", false);
    m->xattrs.clear();
    if (const json* xattrs = r.Array("xattrs")) {
      for (const json& x : *xattrs) {
        if (!x.is_object()) {
          r.Fail("xattrs", "must hold objects");
          break;
        }
        Fields xr(x, MsgType::kDiffEntry);
        Xattr xa;
        xa.name = xr.Bytes("name", true);
        absl::StatusOr<std::string> value = Base64Decode(xr.Str("value", true));
        if (!value.ok()) xr.Fail("value", std::string(value.status().message()));
        if (!xr.status().ok()) {
          r.Fail("xattrs", std::string(xr.status().message()));
          break;
        }
        xa.value = *std::move(value);
        m->xattrs.push_back(std::move(xa));
      }
    }
    if (m->type != DiffType::kFile && m->size != 0) r.Fail("size", "only files carry data");
    if (m->type == DiffType::kSymlink && m->target.empty()) r.Fail("target", "missing");
    if (m->type == DiffType::kHardlink && m->link.empty()) r.Fail("link", "missing");
  });
}

absl::Status FromFrame(const Frame& f, DiffEnd* m) {
  return DecodeWith(f, MsgType::kDiffEnd, [&](Fields& r) {
    m->entries = r.U64("entries", 0, /*required=*/true);
    m->data_bytes = r.U64("data_bytes", 0);
  });
}

absl::Status CheckEmptyObject(const Frame& f) {
  if (!IsJsonType(f.type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol: ", TypeName(f.type), " does not carry JSON"));
  }
  return DecodeWith(f, f.type, [](Fields&) {});
}

absl::Status ValidateFrame(const Frame& f) {
  switch (f.type) {
    case MsgType::kHello:
      return Decode<Hello>(f).status();
    case MsgType::kError:
      return Decode<ErrorMsg>(f).status();
    case MsgType::kData:
    case MsgType::kStdin:
      return absl::OkStatus();
    case MsgType::kExec:
      return Decode<ExecRequest>(f).status();
    case MsgType::kExecStarted:
      return Decode<ExecStarted>(f).status();
    case MsgType::kOutput:
      return Decode<OutputChunk>(f).status();
    case MsgType::kExecDone:
      return Decode<ExecDone>(f).status();
    case MsgType::kFileRead:
      return Decode<FileReadRequest>(f).status();
    case MsgType::kFileReadDone:
      return Decode<FileReadDone>(f).status();
    case MsgType::kFileWrite:
      return Decode<FileWriteRequest>(f).status();
    case MsgType::kFileWriteDone:
      return Decode<FileWriteDone>(f).status();
    case MsgType::kListDir:
      return Decode<ListDirRequest>(f).status();
    case MsgType::kDirEntries:
      return Decode<DirEntries>(f).status();
    case MsgType::kWatch:
      return Decode<WatchRequest>(f).status();
    case MsgType::kWatchStarted:
      return Decode<WatchStarted>(f).status();
    case MsgType::kWatchEvents:
      return Decode<WatchEvents>(f).status();
    case MsgType::kDiffEntry:
      return Decode<DiffEntry>(f).status();
    case MsgType::kDiffEnd:
      return Decode<DiffEnd>(f).status();
    case MsgType::kNetwork:
      return Decode<NetworkRequest>(f).status();
    case MsgType::kSignal:
      return Decode<SignalRequest>(f).status();
    case MsgType::kClock:
      return Decode<ClockRequest>(f).status();
    case MsgType::kEntropy:
      return Decode<EntropyRequest>(f).status();
    case MsgType::kEntropyDone:
    case MsgType::kClockDone:
    case MsgType::kNetworkDone:
    case MsgType::kStdinClose:
    case MsgType::kPackDiff:
    case MsgType::kShutdown:
    case MsgType::kShutdownAck:
      return CheckEmptyObject(f);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("protocol: unknown frame type ", TypeName(f.type)));
}

}  // namespace dsec::agent

// SPDX-License-Identifier: Apache-2.0
#include "sandbox/trajectory/record.h"

#include <openssl/evp.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "base/status.h"

namespace dsec::trajectory {

namespace {

using Json = nlohmann::json;

std::string Sha256Hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // EVP_Digest with SHA-256 only fails on allocation failure.
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1) {
    return "";
  }
  return absl::StrCat("sha256:", absl::BytesToHexString(absl::string_view(
                                     reinterpret_cast<const char*>(md), len)));
}

Json Bytes(const std::string& s) {
  return Json::binary(std::vector<uint8_t>(s.begin(), s.end()));
}

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("trajectory record: ", what));
}

// Typed field access on an untrusted CBOR map.
class Reader {
 public:
  explicit Reader(const Json& j) : j_(j) {}

  absl::StatusOr<uint64_t> U64(const char* key, bool required = true) const {
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) return Bad(absl::StrCat("missing ", key));
      return 0;
    }
    if (!it->is_number_unsigned()) return Bad(absl::StrCat(key, " is not an unsigned integer"));
    return it->get<uint64_t>();
  }
  absl::StatusOr<int64_t> I64(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end()) return 0;
    if (!it->is_number_integer()) return Bad(absl::StrCat(key, " is not an integer"));
    return it->get<int64_t>();
  }
  absl::StatusOr<bool> Bool(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end()) return false;
    if (!it->is_boolean()) return Bad(absl::StrCat(key, " is not a boolean"));
    return it->get<bool>();
  }
  absl::StatusOr<std::string> Text(const char* key, size_t max) const {
    auto it = j_.find(key);
    if (it == j_.end()) return std::string();
    if (!it->is_string()) return Bad(absl::StrCat(key, " is not a string"));
    const auto& s = it->get_ref<const std::string&>();
    if (s.size() > max) return Bad(absl::StrCat(key, " is longer than ", max, " bytes"));
    return s;
  }
  absl::StatusOr<std::string> Blob(const char* key, size_t max) const {
    auto it = j_.find(key);
    if (it == j_.end()) return std::string();
    if (!it->is_binary()) return Bad(absl::StrCat(key, " is not a byte string"));
    const auto& b = it->get_binary();
    if (b.size() > max) return Bad(absl::StrCat(key, " is longer than ", max, " bytes"));
    return std::string(b.begin(), b.end());
  }

 private:
  const Json& j_;
};

}  // namespace

std::string DigestEnv(std::vector<std::string> env) {
  std::sort(env.begin(), env.end());
  std::string joined;
  for (const auto& e : env) {
    // Length-prefixed so that {"A=1\0B=2"} and {"A=1", "B=2"} differ.
    absl::StrAppend(&joined, e.size(), ":", e);
  }
  return Sha256Hex(joined);
}

std::string DigestBytes(std::string_view bytes) { return Sha256Hex(bytes); }

absl::Status ValidateRecord(const Record& r) {
  if (r.kind != RecordKind::kExec && r.kind != RecordKind::kCheckpoint &&
      r.kind != RecordKind::kBranch) {
    return Bad("unknown kind");
  }
  if (r.kind == RecordKind::kCheckpoint && r.layer.empty()) return Bad("checkpoint without a layer");
  if (r.layer.size() > kMaxTextField) return Bad("layer reference is too long");
  if (r.kind != RecordKind::kExec) return absl::OkStatus();
  const ExecRequest& q = r.request;
  if (q.argv.empty()) return Bad("empty argv");
  if (q.argv.size() > kMaxArgv) return Bad("argv has too many entries");
  size_t total = 0;
  for (const auto& a : q.argv) total += a.size();
  if (total > kMaxArgBytes) return Bad("argv is too long");
  if (q.cwd.size() > kMaxTextField || q.env_digest.size() > kMaxTextField ||
      q.stdin_digest.size() > kMaxTextField) {
    return Bad("cwd or digest is too long");
  }
  if (r.result.stdout_data.size() > kMaxOutputBytes ||
      r.result.stderr_data.size() > kMaxOutputBytes) {
    return Bad("output is longer than the record limit");
  }
  if (r.result.exit_code < -1 || r.result.exit_code > 255 || r.result.signal < 0 ||
      r.result.signal > 64) {
    return Bad("exit code or signal out of range");
  }
  return absl::OkStatus();
}

std::string EncodeRecord(const Record& r) {
  Json j = Json::object();
  j["v"] = 1;
  j["kind"] = static_cast<uint64_t>(r.kind);
  j["seq"] = r.seq;
  switch (r.kind) {
    case RecordKind::kExec: {
      j["argv"] = r.request.argv;
      j["cwd"] = r.request.cwd;
      j["env"] = r.request.env_digest;
      j["stdin"] = r.request.stdin_digest;
      j["idem"] = r.request.idempotent;
      j["out"] = Bytes(r.result.stdout_data);
      j["err"] = Bytes(r.result.stderr_data);
      j["out_drop"] = r.result.stdout_dropped;
      j["err_drop"] = r.result.stderr_dropped;
      j["exit"] = r.result.exit_code;
      j["sig"] = r.result.signal;
      j["timeout"] = r.result.timed_out;
      j["start"] = r.result.start_unix_ns;
      j["dur"] = r.result.duration_ns;
      j["quota_drop"] = r.quota_dropped;
      break;
    }
    case RecordKind::kCheckpoint:
      j["layer"] = r.layer;
      break;
    case RecordKind::kBranch:
      break;
  }
  std::vector<uint8_t> cbor = Json::to_cbor(j);
  return std::string(cbor.begin(), cbor.end());
}

absl::StatusOr<Record> DecodeRecord(std::string_view bytes) {
  Json j;
  try {
    // allow_exceptions=false does not cover every path in nlohmann-json
    // 3.11.2: a huge declared array size still throws out_of_range
    // (found by the fuzzer).
    j = Json::from_cbor(bytes.begin(), bytes.end(), /*strict=*/true,
                        /*allow_exceptions=*/false);
  } catch (const Json::exception& e) {
    return Bad(absl::StrCat("not valid CBOR: ", e.what()));
  }
  if (j.is_discarded()) return Bad("not valid CBOR");
  if (!j.is_object()) return Bad("not a map");
  Reader in(j);
  Record r;
  DSEC_ASSIGN_OR_RETURN(uint64_t version, in.U64("v"));
  if (version != 1) return Bad(absl::StrCat("unknown version ", version));
  DSEC_ASSIGN_OR_RETURN(uint64_t kind, in.U64("kind"));
  if (kind < 1 || kind > 3) return Bad(absl::StrCat("unknown kind ", kind));
  r.kind = static_cast<RecordKind>(kind);
  DSEC_ASSIGN_OR_RETURN(r.seq, in.U64("seq"));
  switch (r.kind) {
    case RecordKind::kExec: {
      auto argv = j.find("argv");
      if (argv == j.end() || !argv->is_array()) return Bad("argv is not an array");
      if (argv->size() > kMaxArgv) return Bad("argv has too many entries");
      size_t total = 0;
      for (const auto& a : *argv) {
        if (!a.is_string()) return Bad("argv entry is not a string");
        total += a.get_ref<const std::string&>().size();
        if (total > kMaxArgBytes) return Bad("argv is too long");
        r.request.argv.push_back(a.get<std::string>());
      }
      if (r.request.argv.empty()) return Bad("empty argv");
      DSEC_ASSIGN_OR_RETURN(r.request.cwd, in.Text("cwd", kMaxTextField));
      DSEC_ASSIGN_OR_RETURN(r.request.env_digest, in.Text("env", kMaxTextField));
      DSEC_ASSIGN_OR_RETURN(r.request.stdin_digest, in.Text("stdin", kMaxTextField));
      DSEC_ASSIGN_OR_RETURN(r.request.idempotent, in.Bool("idem"));
      DSEC_ASSIGN_OR_RETURN(r.result.stdout_data, in.Blob("out", kMaxOutputBytes));
      DSEC_ASSIGN_OR_RETURN(r.result.stderr_data, in.Blob("err", kMaxOutputBytes));
      DSEC_ASSIGN_OR_RETURN(r.result.stdout_dropped, in.U64("out_drop", false));
      DSEC_ASSIGN_OR_RETURN(r.result.stderr_dropped, in.U64("err_drop", false));
      DSEC_ASSIGN_OR_RETURN(int64_t exit_code, in.I64("exit"));
      DSEC_ASSIGN_OR_RETURN(int64_t sig, in.I64("sig"));
      if (exit_code < -1 || exit_code > 255 || sig < 0 || sig > 64) {
        return Bad("exit code or signal out of range");
      }
      r.result.exit_code = static_cast<int32_t>(exit_code);
      r.result.signal = static_cast<int32_t>(sig);
      DSEC_ASSIGN_OR_RETURN(r.result.timed_out, in.Bool("timeout"));
      DSEC_ASSIGN_OR_RETURN(r.result.start_unix_ns, in.I64("start"));
      DSEC_ASSIGN_OR_RETURN(r.result.duration_ns, in.I64("dur"));
      DSEC_ASSIGN_OR_RETURN(r.quota_dropped, in.U64("quota_drop", false));
      break;
    }
    case RecordKind::kCheckpoint: {
      DSEC_ASSIGN_OR_RETURN(r.layer, in.Text("layer", kMaxTextField));
      if (r.layer.empty()) return Bad("checkpoint without a layer");
      break;
    }
    case RecordKind::kBranch:
      break;
  }
  return r;
}

}  // namespace dsec::trajectory

// SPDX-License-Identifier: Apache-2.0
// Feeds request lines to the control socket's parser (a client's input,
// vmm/api/control.h) and to the line handler: a parsed request is within
// the documented bounds, and every answer is one line of valid JSON with
// "ok". Half the inputs are raw text; the other half build a request object
// from the bytes (ops, keys and values from the protocol and around it), so
// that a short run from an empty corpus reaches every op.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "fuzzer/FuzzedDataProvider.h"
#include "nlohmann/json.hpp"
#include "vmm/api/control.h"

namespace {

nlohmann::json Value(FuzzedDataProvider& in) {
  static const char* const kWords[] = {"stats", "balloon", "pause", "resume", "", "STATS"};
  switch (in.ConsumeIntegralInRange(0, 8)) {
    case 0: return in.ConsumeIntegral<uint8_t>();                    // small
    case 1: return in.ConsumeIntegral<int64_t>();                    // negative too
    case 2: return in.ConsumeIntegral<uint64_t>();                   // above 2^20
    case 3: return (uint64_t{1} << 20) + in.ConsumeIntegralInRange(0, 2) - 1;  // the limit
    case 4: return in.ConsumeFloatingPoint<double>();
    case 5: return in.PickValueInArray(kWords);
    case 6: return in.ConsumeRandomLengthString(24);
    case 7: return in.ConsumeBool() ? nlohmann::json(nullptr) : nlohmann::json(true);
    default: return in.ConsumeBool() ? nlohmann::json::array() : nlohmann::json::object();
  }
}

std::string Request(FuzzedDataProvider& in) {
  static const char* const kKeys[] = {"op", "op", "target_mib", "target_mib", "extra"};
  nlohmann::json j = nlohmann::json::object();
  for (int n = in.ConsumeIntegralInRange(0, 3); n >= 0; --n) j[in.PickValueInArray(kKeys)] = Value(in);
  // Invalid UTF-8 from a string is replaced, as a client's bytes would be.
  std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (in.ConsumeIntegralInRange(0, 7) == 0) line += "\r";
  return line;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  FuzzedDataProvider in(data + 1, size - 1);
  const std::string built = data[0] % 2 == 0 ? Request(in) : std::string();
  const std::string_view line =
      data[0] % 2 == 0 ? std::string_view(built)
                       : std::string_view(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<dsec::api::ControlRequest> req = dsec::api::ParseControlRequest(line);
  if (req.ok()) {
    using Op = dsec::api::ControlRequest::Op;
    DSEC_CHECK(req->op == Op::kStats || req->op == Op::kBalloon || req->op == Op::kPause ||
               req->op == Op::kResume || req->op == Op::kSnapshot);
    DSEC_CHECK(req->target_mib <= (uint64_t{1} << 20));
    DSEC_CHECK(req->op == Op::kBalloon || req->target_mib == 0);
  } else {
    DSEC_CHECK(req.status().code() == absl::StatusCode::kInvalidArgument);
  }
  // The server's path: a handler that answers with what it was asked (and
  // refuses pause); the response must be one JSON line with "ok".
  const std::string out = dsec::api::HandleControlLine(
      line, [](const dsec::api::ControlRequest& r) -> absl::StatusOr<nlohmann::json> {
        if (r.op == dsec::api::ControlRequest::Op::kPause) {
          return absl::FailedPreconditionError("paused already");
        }
        return nlohmann::json{{"ok", true}, {"target_mib", r.target_mib}};
      });
  DSEC_CHECK(out.find('\n') == std::string::npos);
  nlohmann::json answer = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  DSEC_CHECK(answer.is_object() && answer.contains("ok"));
  // A trailing \r is the handler's to strip, not the parser's: compare with
  // what the handler saw.
  std::string_view handled = line;
  if (!handled.empty() && handled.back() == '\r') handled.remove_suffix(1);
  absl::StatusOr<dsec::api::ControlRequest> seen = dsec::api::ParseControlRequest(handled);
  const bool answered = seen.ok() && seen->op != dsec::api::ControlRequest::Op::kPause;
  DSEC_CHECK(answer["ok"].is_boolean() && answer["ok"].get<bool>() == answered);
  return 0;
}

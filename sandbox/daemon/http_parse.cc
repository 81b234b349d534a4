// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/http_parse.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dsec::daemon {

namespace {

// RFC 9110 section 5.6.2.
bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

bool IsToken(absl::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar); }

// 1*DIGIT below 2^53 (no sign, no spaces inside, no hex): anything else
// is not a length. 2^53 is far above any limit and keeps the sum of a
// length and an offset exact.
bool ParseLength(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= (uint64_t{1} << 53)) return false;
  *out = v;
  return true;
}

}  // namespace

size_t FindHeadEnd(absl::string_view buf) {
  const size_t p = buf.find("\r\n\r\n");
  return p == absl::string_view::npos ? absl::string_view::npos : p + 4;
}

absl::StatusOr<RequestHead> ParseRequestHead(absl::string_view head, size_t max_fields) {
  RequestHead h;
  if (!absl::EndsWith(head, "\r\n\r\n")) return absl::InvalidArgumentError("the request head does not end");
  head.remove_suffix(4);
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  // Request line: method SP target SP HTTP/1.x (RFC 9112 section 3).
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || parts[1].empty() || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return absl::InvalidArgumentError("malformed request line");
  }
  h.method = std::string(parts[0]);
  h.path = std::string(parts[1].substr(0, parts[1].find('?')));
  if (lines.size() - 1 > max_fields) {
    return absl::ResourceExhaustedError(absl::StrCat("more than ", max_fields, " header fields"));
  }
  bool has_te = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    // No obsolete line folding, no space before the colon (RFC 9112
    // section 5): both are refused rather than guessed at.
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) {
      return absl::InvalidArgumentError("malformed header field");
    }
    const absl::string_view name = line.substr(0, colon);
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "Content-Length")) {
      uint64_t len = 0;
      if (!ParseLength(value, &len)) {
        return absl::InvalidArgumentError("Content-Length must be one decimal number of bytes (below 2^53)");
      }
      if (h.has_length && len != h.content_length) {
        return absl::InvalidArgumentError("two different Content-Length values");
      }
      h.has_length = true;
      h.content_length = len;
    } else if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
      if (has_te || !absl::EqualsIgnoreCase(value, "chunked")) {
        return absl::InvalidArgumentError("the only Transfer-Encoding taken is \"chunked\"");
      }
      has_te = true;
      h.chunked = true;
    }
  }
  if (h.chunked && h.has_length) {
    return absl::InvalidArgumentError("both Content-Length and Transfer-Encoding");
  }
  return h;
}

size_t BodyLimitFor(const RequestHead& head, const BodyLimits& limits) {
  // PUT /v1/sandboxes/{id}/files (the route's pattern in http_server.cc).
  constexpr absl::string_view kPrefix = "/v1/sandboxes/", kSuffix = "/files";
  const absl::string_view p = head.path;
  if (head.method == "PUT" && absl::StartsWith(p, kPrefix) && absl::EndsWith(p, kSuffix) &&
      p.size() > kPrefix.size() + kSuffix.size()) {
    const absl::string_view id = p.substr(kPrefix.size(), p.size() - kPrefix.size() - kSuffix.size());
    if (id.find('/') == absl::string_view::npos) return limits.file_bytes;
  }
  return limits.json_bytes;
}

absl::StatusOr<std::vector<ByteRange>> ResolveRanges(absl::string_view header, uint64_t size, size_t max_ranges) {
  absl::string_view spec = absl::StripAsciiWhitespace(header);
  if (!absl::ConsumePrefix(&spec, "bytes=")) return absl::InvalidArgumentError("Range must be bytes=...");
  std::vector<ByteRange> out;
  size_t count = 0;
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (++count > max_ranges) {
      return absl::InvalidArgumentError(absl::StrCat("at most ", max_ranges, " ranges in one request"));
    }
    const size_t dash = part.find('-');
    if (dash == absl::string_view::npos) return absl::InvalidArgumentError("malformed range");
    const absl::string_view first = part.substr(0, dash), last = part.substr(dash + 1);
    uint64_t a = 0, b = 0;
    if (first.empty()) {  // suffix: the last b bytes
      if (!ParseLength(last, &b) || b == 0) return absl::InvalidArgumentError("malformed range");
      if (size == 0) continue;
      const uint64_t n = std::min(b, size);
      out.push_back({size - n, n});
      continue;
    }
    if (!ParseLength(first, &a)) return absl::InvalidArgumentError("malformed range");
    if (last.empty()) {
      b = size == 0 ? 0 : size - 1;
    } else if (!ParseLength(last, &b) || b < a) {
      return absl::InvalidArgumentError("malformed range");
    }
    if (a >= size) continue;  // unsatisfiable, dropped
    b = std::min(b, size - 1);
    out.push_back({a, b - a + 1});
  }
  if (count == 0) return absl::InvalidArgumentError("malformed range");
  if (out.empty()) return absl::OutOfRangeError(absl::StrCat("no range starts within the ", size, " bytes"));
  std::sort(out.begin(), out.end(), [](const ByteRange& x, const ByteRange& y) { return x.offset < y.offset; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : out) {
    if (!merged.empty() && r.offset <= merged.back().offset + merged.back().length) {
      ByteRange& m = merged.back();
      m.length = std::max(m.offset + m.length, r.offset + r.length) - m.offset;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

RangedBody MakeRangedBody(absl::string_view data, const std::vector<ByteRange>& ranges,
                          absl::string_view content_type, absl::string_view boundary) {
  RangedBody out;
  auto content_range = [&](const ByteRange& r) {
    return absl::StrCat("bytes ", r.offset, "-", r.offset + r.length - 1, "/", data.size());
  };
  if (ranges.size() == 1) {
    out.content_type = std::string(content_type);
    out.content_range = content_range(ranges[0]);
    out.body = std::string(data.substr(ranges[0].offset, ranges[0].length));
    return out;
  }
  out.content_type = absl::StrCat("multipart/byteranges; boundary=", boundary);
  for (const ByteRange& r : ranges) {
    absl::StrAppend(&out.body, "--", boundary, "\r\nContent-Type: ", content_type,
                    "\r\nContent-Range: ", content_range(r), "\r\n\r\n", data.substr(r.offset, r.length), "\r\n");
  }
  absl::StrAppend(&out.body, "--", boundary, "--\r\n");
  return out;
}

bool JsonNestsDeeperThan(absl::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced input is the parser's to refuse
    }
  }
  return false;
}

absl::StatusOr<nlohmann::json> ParseJsonBody(absl::string_view body, size_t max_bytes, int max_depth) {
  if (body.size() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("request body over the ", max_bytes, "-byte limit"));
  }
  if (body.empty()) return nlohmann::json::object();
  if (JsonNestsDeeperThan(body, max_depth)) {
    return absl::InvalidArgumentError(absl::StrCat("the request body is nested deeper than ", max_depth, " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the request body is not valid JSON");
  return j;
}

}  // namespace dsec::daemon

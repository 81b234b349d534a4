// SPDX-License-Identifier: Apache-2.0
// What the HTTP layer checks in a request before cpp-httplib or the JSON
// parser spend memory on it: the head's end and body framing (RFC 9112
// sections 2-6), the byte ranges of a file read (RFC 9110 section 14), and
// the nesting depth of a JSON body. Pure functions, no I/O; fuzzed by
// fuzz/http_parse_fuzzer.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace dsec::daemon {

// A request head as far as the limits need it.
struct RequestHead {
  std::string method;
  std::string path;  // the target up to '?'
  bool chunked = false;
  bool has_length = false;
  uint64_t content_length = 0;
};

// Offset just past the empty line that ends the head at the start of `buf`
// ("\r\n\r\n"), or npos while it has not come.
size_t FindHeadEnd(absl::string_view buf);

// Parses a head (request line, fields, the empty line). InvalidArgument
// (400) for a malformed request line or field, a Content-Length that is
// not one decimal number below 2^53, two different ones, a
// Transfer-Encoding other than "chunked", or both framings at once
// (RFC 9112 section 6.3: a request smuggling vector). ResourceExhausted for
// more than `max_fields` fields (431).
absl::StatusOr<RequestHead> ParseRequestHead(absl::string_view head, size_t max_fields = 128);

struct BodyLimits {
  size_t json_bytes = 1u << 20;
  size_t file_bytes = 64u << 20;
};
// The largest body the route of `head` takes: a file upload
// (PUT /v1/sandboxes/{id}/files) `file_bytes`; anything else `json_bytes`.
size_t BodyLimitFor(const RequestHead& head, const BodyLimits& limits);

// A byte range of a representation, resolved against its size.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};
inline constexpr size_t kMaxRanges = 16;

// Resolves a Range header value ("bytes=0-99,-5") against `size` bytes:
// more than `max_ranges` ranges or a malformed value is InvalidArgument,
// ranges that start past the end are dropped, and OutOfRange when none is
// left (both 416). The rest come sorted, those that overlap or touch merged
// into one, so their total is at most `size`.
absl::StatusOr<std::vector<ByteRange>> ResolveRanges(absl::string_view header, uint64_t size,
                                                     size_t max_ranges = kMaxRanges);

// The 206 answer for `ranges` of `data`: one range is its bytes and a
// Content-Range; several are a multipart/byteranges body whose parts carry
// `content_type` (RFC 9110 section 14.6).
struct RangedBody {
  std::string content_type;
  std::string content_range;  // one range only
  std::string body;
};
RangedBody MakeRangedBody(absl::string_view data, const std::vector<ByteRange>& ranges,
                          absl::string_view content_type, absl::string_view boundary);

inline constexpr int kMaxJsonDepth = 64;
// Whether `text` nests arrays and objects deeper than `max_depth`: a scan
// that follows strings and their escapes and allocates nothing, so that a
// deep body is refused before the parser builds it (nlohmann's parser would
// build the whole tree first).
bool JsonNestsDeeperThan(absl::string_view text, int max_depth);

// A JSON request body: at most `max_bytes` (ResourceExhausted, 413),
// nested at most `max_depth` deep and valid JSON (InvalidArgument); an
// empty body is {}.
absl::StatusOr<nlohmann::json> ParseJsonBody(absl::string_view body, size_t max_bytes,
                                             int max_depth = kMaxJsonDepth);

}  // namespace dsec::daemon

# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 message framing for the asyncio client, without I/O (RFC 9112).

Only what the daemon's API needs: requests with a Content-Length body;
responses framed by Content-Length, chunked transfer coding (the NDJSON
exec stream) or the connection's close. The blocking client uses
http.client instead; this is the asyncio transport's half.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional

from . import errors

MAX_HEAD_BYTES = 64 * 1024   # status line and headers (asyncio's default stream limit)
MAX_LINE_BYTES = 16 << 20    # one NDJSON line (the daemon's are at most ~90 KiB)

# Methods whose request has a body by definition: an empty one is sent with
# Content-Length: 0 (as http.client does), which some servers require.
_BODY_METHODS = ("POST", "PUT", "PATCH")


def encode_request(method: str, target: str, host: str, headers: Mapping[str, str],
                   body: Optional[bytes]) -> bytes:
    """The request's bytes. Refuses CR, LF or NUL in any line (header injection)."""
    fields = [method, target, host] + [s for kv in headers.items() for s in kv]
    for f in fields:
        if any(c in f for c in "\r\n\0"):
            raise ValueError("CR, LF or NUL in an HTTP request line or header: %r" % (f,))
    lines = ["%s %s HTTP/1.1" % (method, target), "Host: " + host]
    lines += ["%s: %s" % (k, v) for k, v in headers.items()]
    if body is not None or method in _BODY_METHODS:
        lines.append("Content-Length: %d" % len(body or b""))
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (body or b"")


@dataclasses.dataclass(frozen=True)
class ResponseHead:
    version: str                # "HTTP/1.1"
    status: int
    reason: str
    headers: Dict[str, str]     # lower-case names; repeated fields joined with ", "

    def _tokens(self, name: str) -> List[str]:
        return [t.strip().lower() for t in self.headers.get(name, "").split(",") if t.strip()]

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request after this answer."""
        tokens = self._tokens("connection")
        if "close" in tokens:
            return False
        return self.version != "HTTP/1.0" or "keep-alive" in tokens

    @property
    def has_body(self) -> bool:
        return not (100 <= self.status < 200 or self.status in (204, 304))

    @property
    def chunked(self) -> bool:
        te = self._tokens("transfer-encoding")
        return bool(te) and te[-1] == "chunked"

    @property
    def content_length(self) -> Optional[int]:
        """The body's length, None when it is not given (chunked, or until close)."""
        if "transfer-encoding" in self.headers:
            return None  # RFC 9112 6.3: Transfer-Encoding overrides Content-Length
        value = self.headers.get("content-length")
        if value is None:
            return None
        values = {v.strip() for v in value.split(",")}
        if len(values) != 1:
            raise errors.ProtocolError("conflicting Content-Length: %r" % value)
        v = values.pop()
        if not v.isdigit():
            raise errors.ProtocolError("bad Content-Length: %r" % value)
        return int(v)


def parse_head(raw: bytes) -> ResponseHead:
    """Parses a status line and header fields ending with an empty line."""
    text = raw.decode("latin-1")
    lines = text.split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise errors.ProtocolError("empty HTTP response head")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3 \
            or not parts[1].isdigit():
        raise errors.ProtocolError("bad HTTP status line: %r" % lines[0][:200])
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        if line[:1] in (" ", "\t"):
            raise errors.ProtocolError("folded HTTP header line: %r" % line[:200])
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise errors.ProtocolError("bad HTTP header line: %r" % line[:200])
        key = name.lower()
        value = value.strip()
        headers[key] = headers[key] + ", " + value if key in headers else value
    return ResponseHead(parts[0], int(parts[1]), parts[2] if len(parts) > 2 else "", headers)


def parse_chunk_size(line: bytes) -> int:
    """The size from a chunk-size line (extensions after ';' ignored)."""
    size = line.split(b";", 1)[0].strip()
    try:
        if not size or not all(c in b"0123456789abcdefABCDEF" for c in size):
            raise ValueError(size)
        return int(size, 16)
    except ValueError:
        raise errors.ProtocolError("bad chunk size line: %r" % line[:100]) from None

# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by libdsec.

Every error the daemon returns is a DsecError carrying the daemon's code,
message, the request field at fault (when one is) and the HTTP status. The
subclass is chosen from the code (the HTTP status when the body carries no
code), so callers can catch what they can act on:

    DsecError
      InvalidArgument     INVALID_ARGUMENT, 400
      NotFound            NOT_FOUND, 404
      Conflict            FAILED_PRECONDITION / ALREADY_EXISTS, 409
      ResourceExhausted   RESOURCE_EXHAUSTED, 429, 413
      Unavailable         UNAVAILABLE, 503
      Unauthenticated     UNAUTHENTICATED, 401
      DeadlineExceeded    DEADLINE_EXCEEDED, 504
      InternalError       INTERNAL, other 5xx
      ProtocolError       the daemon's answer does not follow the API
      ExecFailed          ExecResult.check() on a failed command
    TransportError        (also a ConnectionError) the daemon cannot be reached
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import TYPE_CHECKING, Any, Dict, Optional, Type

if TYPE_CHECKING:
    from .results import ExecResult


class DsecError(Exception):
    """An error reported by the daemon (or found in its answer)."""

    def __init__(self, message: str, code: Optional[str] = None, field: Optional[str] = None,
                 status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        self.status = status

    def __str__(self) -> str:
        parts = []
        if self.code:
            parts.append(self.code)
        if self.status is not None:
            parts.append("HTTP %d" % self.status)
        head = "[%s] " % ", ".join(parts) if parts else ""
        tail = " (field: %s)" % self.field if self.field else ""
        return "%s%s%s" % (head, self.message, tail)


class InvalidArgument(DsecError):
    """The request was malformed or a field value was refused (400)."""


class NotFound(DsecError):
    """Unknown sandbox, layer, task or file (404)."""


class Conflict(DsecError):
    """Wrong state for the operation, or the name exists (409)."""


class ResourceExhausted(DsecError):
    """A limit was hit: the node's (sandboxes, concurrent execs, body size) or
    the sandbox's own (a file write its memory cannot hold) (429/413)."""


class Unavailable(DsecError):
    """The requested tier or feature is not available on this node (503)."""


class Unauthenticated(DsecError):
    """Missing or wrong bearer token (401)."""


class DeadlineExceeded(DsecError):
    """The daemon gave up waiting on something (504)."""


class InternalError(DsecError):
    """The daemon failed unexpectedly (500)."""


class ProtocolError(DsecError):
    """The daemon's answer does not follow the API contract."""


class ExecFailed(DsecError):
    """Raised by ExecResult.check(): the command did not exit with status 0."""

    def __init__(self, message: str, result: "ExecResult") -> None:
        super().__init__(message, code="EXEC_FAILED")
        self.result = result


class TransportError(DsecError, ConnectionError):
    """The daemon could not be reached, or the connection broke mid-request."""

    def __init__(self, message: str, endpoint: Optional[str] = None) -> None:
        DsecError.__init__(self, message, code="TRANSPORT")
        self.endpoint = endpoint

    def __str__(self) -> str:
        return self.message


_BY_CODE: Dict[str, Type[DsecError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": Conflict,
    "FAILED_PRECONDITION": Conflict,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "UNAVAILABLE": Unavailable,
    "UNAUTHENTICATED": Unauthenticated,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "INTERNAL": InternalError,
}

_BY_STATUS: Dict[int, Type[DsecError]] = {
    400: InvalidArgument,
    401: Unauthenticated,
    404: NotFound,
    409: Conflict,
    413: ResourceExhausted,
    429: ResourceExhausted,
    503: Unavailable,
    504: DeadlineExceeded,
}


def _str_or_none(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def error_from_response(status: int, body: bytes, reason: str = "") -> DsecError:
    """Builds the exception for an HTTP error answer (status >= 400)."""
    code = message = field = None
    try:
        err = json.loads(body.decode("utf-8")).get("error")
        if isinstance(err, dict):
            code = _str_or_none(err.get("code"))
            message = err.get("message")
            field = _str_or_none(err.get("field"))
    except (ValueError, AttributeError, UnicodeDecodeError):
        pass
    if not isinstance(message, str) or not message:
        text = body[:200].decode("utf-8", "replace").strip()
        message = text or reason or "HTTP %d" % status
    cls = _BY_CODE.get(code) if code else None
    if cls is None:
        cls = _BY_STATUS.get(status, InternalError if status >= 500 else DsecError)
    return cls(message, code=code, field=field, status=status)


def error_from_object(obj: Any, status: Optional[int] = None) -> DsecError:
    """Builds the exception for an {"error": {...}} object met mid-stream."""
    err = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(err, dict):
        return ProtocolError("malformed error object: %r" % (obj,), status=status)
    code = _str_or_none(err.get("code"))
    cls: Type[DsecError] = _BY_CODE.get(code, DsecError) if code else DsecError
    return cls(str(err.get("message") or code or "error"), code=code,
               field=_str_or_none(err.get("field")), status=status)


def transport_error(endpoint: str, method: str, path: str, exc: BaseException) -> TransportError:
    """The TransportError for a request that failed on the wire (both clients)."""
    if isinstance(exc, (socket.timeout, asyncio.TimeoutError)):
        what = "timed out"
    else:
        what = "%s: %s" % (type(exc).__name__, exc)
    hint = ""
    if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
        hint = " (is the daemon running? start it with `dsec-vmm serve`)"
    return TransportError(
        "dsec-vmm daemon at %s: %s %s failed: %s%s" % (endpoint, method, path, what, hint),
        endpoint=endpoint)

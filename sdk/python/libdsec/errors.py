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

import json


class DsecError(Exception):
    """An error reported by the daemon (or found in its answer)."""

    def __init__(self, message, code=None, field=None, status=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        self.status = status

    def __str__(self):
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
    """A node limit was hit: sandboxes, concurrent execs, body size (429/413)."""


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

    def __init__(self, message, result):
        super().__init__(message, code="EXEC_FAILED")
        self.result = result


class TransportError(DsecError, ConnectionError):
    """The daemon could not be reached, or the connection broke mid-request."""

    def __init__(self, message, endpoint=None):
        DsecError.__init__(self, message, code="TRANSPORT")
        self.endpoint = endpoint

    def __str__(self):
        return self.message


_BY_CODE = {
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

_BY_STATUS = {
    400: InvalidArgument,
    401: Unauthenticated,
    404: NotFound,
    409: Conflict,
    413: ResourceExhausted,
    429: ResourceExhausted,
    503: Unavailable,
    504: DeadlineExceeded,
}


def error_from_response(status, body, reason=""):
    """Builds the exception for an HTTP error answer (status >= 400)."""
    code = message = field = None
    try:
        err = json.loads(body.decode("utf-8")).get("error")
        if isinstance(err, dict):
            code = err.get("code") if isinstance(err.get("code"), str) else None
            message = err.get("message")
            field = err.get("field")
    except (ValueError, AttributeError, UnicodeDecodeError):
        pass
    if not isinstance(message, str) or not message:
        text = body[:200].decode("utf-8", "replace").strip()
        message = text or reason or "HTTP %d" % status
    cls = _BY_CODE.get(code) if code else None
    if cls is None:
        cls = _BY_STATUS.get(status, InternalError if status >= 500 else DsecError)
    return cls(message, code=code, field=field, status=status)


def error_from_object(obj, status=None):
    """Builds the exception for an {"error": {...}} object met mid-stream."""
    err = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(err, dict):
        return ProtocolError("malformed error object: %r" % (obj,), status=status)
    code = err.get("code")
    cls = _BY_CODE.get(code, DsecError)
    return cls(str(err.get("message") or code or "error"), code=code,
               field=err.get("field"), status=status)

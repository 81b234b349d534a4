# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 to the daemon over a unix socket or TCP, one connection per thread.

http.client connections are not thread-safe, so each thread that uses a
Client gets its own keep-alive connection (threading.local). A connection
made before os.fork() is never used by the child: it notices the pid change
and reconnects. What is sent and how answers are read is _protocol's; this
module only moves it.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import weakref
from typing import Any, Optional, Tuple

from . import errors
from ._protocol import DEFAULT_SOCKET, Call, Endpoint, Response, decode_json, raise_for_status
from ._protocol import query, quote_segment  # noqa: F401  (kept importable from here)

__all__ = ["DEFAULT_SOCKET", "Response", "Transport", "UnixHTTPConnection", "query",
           "quote_segment"]

# A reused keep-alive connection the daemon already closed fails at once with
# one of these before the daemon has read the request, so the request is sent
# again once on a fresh connection. A fresh connection is never retried.
_STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError,
                     ConnectionResetError, ConnectionAbortedError)


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection whose transport is an AF_UNIX stream socket."""

    def __init__(self, socket_path: str, timeout: Optional[float] = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        # connect(2) on AF_UNIX fails at once with EAGAIN while the daemon's
        # listen backlog is full (TCP would queue the SYN instead). No byte
        # of the request has been sent, so trying again is safe even for a
        # non-idempotent exec: back off (1 ms doubling to 50 ms) until the
        # request's timeout. Nothing else is retried here.
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        delay = 0.001
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout)
                sock.connect(self.socket_path)
            except BlockingIOError:
                sock.close()
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)  # backoff: the kernel offers nothing to wait on
                delay = min(delay * 2, 0.05)
                continue
            except BaseException:
                sock.close()
                raise
            self.sock = sock
            return


def _headers_of(resp: http.client.HTTPResponse) -> dict[str, str]:
    return {k.lower(): v for k, v in resp.getheaders()}


class Transport:
    """Sends requests; owns one connection per (thread, process)."""

    def __init__(self, socket_path: Optional[str] = None, url: Optional[str] = None,
                 token: Optional[str] = None, timeout: Optional[float] = 60.0) -> None:
        ep = Endpoint.resolve(socket_path, url)
        self.token = token
        self.timeout = timeout
        self.socket_path = ep.socket_path
        self.host = ep.host
        self.port = ep.port
        self.endpoint = ep.name
        self._local = threading.local()
        self._lock = threading.Lock()
        # Every live connection, so close() reaches all threads' ones; weak so
        # that a connection dropped without release() (an abandoned stream) goes.
        self._all: "weakref.WeakSet[http.client.HTTPConnection]" = weakref.WeakSet()

    # -- connections ------------------------------------------------------

    def _new_connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return UnixHTTPConnection(self.socket_path, timeout=timeout)
        assert self.host is not None
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def acquire(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        """Returns (connection, reused). The caller owns it until release()."""
        conn: Optional[http.client.HTTPConnection] = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            self._local.conn = None
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        if conn is not None:  # inherited across fork(): not ours to use
            self._local.conn = None
            with self._lock:
                self._all.discard(conn)
        conn = self._new_connection(timeout)
        with self._lock:
            self._all.add(conn)
        return conn, False

    def release(self, conn: http.client.HTTPConnection, reusable: bool) -> None:
        """Gives a connection back to this thread, or closes it."""
        if reusable and getattr(self._local, "conn", None) is None:
            self._local.conn = conn
            self._local.pid = os.getpid()
            return
        self.discard(conn)

    def discard(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        with self._lock:
            self._all.discard(conn)

    def close(self) -> None:
        """Closes every connection of every thread (use after all requests end)."""
        with self._lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for c in conns:
            c.close()
        self._local = threading.local()

    # -- requests ---------------------------------------------------------

    def _fail(self, method: str, path: str, exc: BaseException) -> errors.TransportError:
        return errors.transport_error(self.endpoint, method, path, exc)

    def open(self, method: str, path: str, body: Optional[bytes] = None,
             content_type: str = "application/json", accept: str = "application/json",
             timeout: Optional[float] = None
             ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a request and returns (connection, HTTPResponse) with the body unread.

        The caller must read the response and call release() or discard().
        """
        if timeout is None:
            timeout = self.timeout
        headers = Call(method, path, body, content_type, accept).headers(self.token)
        for attempt in (0, 1):
            conn, reused = self.acquire(timeout)
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                return conn, resp
            except _STALE_CONNECTION as e:
                self.discard(conn)
                if reused and attempt == 0:
                    continue
                raise self._fail(method, path, e) from e
            except (OSError, http.client.HTTPException) as e:
                self.discard(conn)
                raise self._fail(method, path, e) from e
        raise AssertionError("unreachable")

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                content_type: str = "application/json", accept: str = "application/json",
                timeout: Optional[float] = None) -> Response:
        """Sends a request, reads the whole answer; raises DsecError on 4xx/5xx."""
        conn, resp = self.open(method, path, body, content_type, accept, timeout)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.discard(conn)
            raise self._fail(method, path, e) from e
        self.release(conn, not resp.will_close)
        raise_for_status(resp.status, resp.reason, data)
        return Response(resp.status, resp.reason, _headers_of(resp), data)

    def request_json(self, method: str, path: str, obj: Any = None,
                     timeout: Optional[float] = None,
                     expect: Tuple[int, ...] = (200, 201)) -> Any:
        """Compatibility: sends obj as JSON and returns the decoded answer."""
        body = None if obj is None else json.dumps(obj).encode("utf-8")
        call = Call(method, path, body, expect=expect)
        return decode_json(call, self.request(method, path, body=body, timeout=timeout))

    # -- calls (_protocol) ------------------------------------------------

    def send(self, call: Call) -> Response:
        return self.request(call.method, call.target, call.body, call.content_type,
                            call.accept, call.timeout(self.timeout))

    def send_json(self, call: Call) -> Any:
        return decode_json(call, self.send(call))

    def open_stream(self, call: Call
                    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends call and returns the 200 response with its body unread; an
        error answer (read whole, the connection kept) raises."""
        conn, resp = self.open(call.method, call.target, call.body, call.content_type,
                               call.accept, call.timeout(self.timeout))
        if resp.status >= 400:
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException):
                data = b""
            self.release(conn, not resp.will_close)
            raise errors.error_from_response(resp.status, data, resp.reason)
        return conn, resp

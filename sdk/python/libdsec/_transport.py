# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 to the daemon over a unix socket or TCP, one connection per thread.

http.client connections are not thread-safe, so each thread that uses a
Client gets its own keep-alive connection (threading.local). A connection
made before os.fork() is never used by the child: it notices the pid change
and reconnects.
"""

import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
import weakref

from . import errors

DEFAULT_SOCKET = "/run/dsec-vmm/api.sock"

# A reused keep-alive connection the daemon already closed fails at once with
# one of these before the daemon has read the request, so the request is sent
# again once on a fresh connection. A fresh connection is never retried.
_STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError,
                     ConnectionResetError, ConnectionAbortedError)


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection whose transport is an AF_UNIX stream socket."""

    def __init__(self, socket_path, timeout=None):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self):
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


class Response:
    """A fully read answer: status, headers and body bytes."""

    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise errors.ProtocolError(
                "answer is not JSON (%s): %r" % (e, self.body[:200]), status=self.status)


class Transport:
    """Sends requests; owns one connection per (thread, process)."""

    def __init__(self, socket_path=None, url=None, token=None, timeout=60.0):
        if url is not None and socket_path is not None:
            raise ValueError("give socket_path or url, not both")
        self.token = token
        self.timeout = timeout
        if url is not None:
            parsed = urllib.parse.urlsplit(url)
            if parsed.scheme != "http" or not parsed.hostname:
                raise ValueError("url must look like http://host:port, got %r" % url)
            if parsed.path not in ("", "/") or parsed.query:
                raise ValueError("url must not have a path or query: %r" % url)
            self.host = parsed.hostname
            self.port = parsed.port or 80
            self.socket_path = None
            self.endpoint = "http://%s:%d" % (self.host, self.port)
        else:
            self.socket_path = (socket_path or os.environ.get("DSEC_SOCKET")
                                or DEFAULT_SOCKET)
            self.endpoint = "unix:" + self.socket_path
        self._local = threading.local()
        self._lock = threading.Lock()
        # Every live connection, so close() reaches all threads' ones; weak so
        # that a connection dropped without release() (an abandoned stream) goes.
        self._all = weakref.WeakSet()

    # -- connections ------------------------------------------------------

    def _new_connection(self, timeout):
        if self.socket_path is not None:
            return UnixHTTPConnection(self.socket_path, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def acquire(self, timeout):
        """Returns (connection, reused). The caller owns it until release()."""
        conn = getattr(self._local, "conn", None)
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

    def release(self, conn, reusable):
        """Gives a connection back to this thread, or closes it."""
        if reusable and getattr(self._local, "conn", None) is None:
            self._local.conn = conn
            self._local.pid = os.getpid()
            return
        self.discard(conn)

    def discard(self, conn):
        conn.close()
        with self._lock:
            self._all.discard(conn)

    def close(self):
        """Closes every connection of every thread (use after all requests end)."""
        with self._lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for c in conns:
            c.close()
        self._local = threading.local()

    # -- requests ---------------------------------------------------------

    def _headers(self, body, content_type, accept):
        h = {"Accept": accept}
        if body is not None:
            h["Content-Type"] = content_type
        if self.token is not None:
            h["Authorization"] = "Bearer " + self.token
        return h

    def _fail(self, method, path, exc):
        if isinstance(exc, socket.timeout):
            what = "timed out"
        else:
            what = "%s: %s" % (type(exc).__name__, exc)
        hint = ""
        if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
            hint = " (is the daemon running? start it with `dsec-vmm serve`)"
        return errors.TransportError(
            "dsec-vmm daemon at %s: %s %s failed: %s%s" % (self.endpoint, method, path, what, hint),
            endpoint=self.endpoint)

    def open(self, method, path, body=None, content_type="application/json",
             accept="application/json", timeout=None):
        """Sends a request and returns (connection, HTTPResponse) with the body unread.

        The caller must read the response and call release() or discard().
        """
        if timeout is None:
            timeout = self.timeout
        headers = self._headers(body, content_type, accept)
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

    def request(self, method, path, body=None, content_type="application/json",
                accept="application/json", timeout=None):
        """Sends a request, reads the whole answer; raises DsecError on 4xx/5xx."""
        conn, resp = self.open(method, path, body, content_type, accept, timeout)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.discard(conn)
            raise self._fail(method, path, e) from e
        self.release(conn, not resp.will_close)
        if resp.status >= 400:
            raise errors.error_from_response(resp.status, data, resp.reason)
        return Response(resp.status, resp.reason, resp.headers, data)

    def request_json(self, method, path, obj=None, timeout=None, expect=(200, 201)):
        body = None if obj is None else json.dumps(obj).encode("utf-8")
        resp = self.request(method, path, body=body, timeout=timeout)
        if resp.status == 204:
            return None
        if resp.status not in expect:
            raise errors.ProtocolError("unexpected HTTP %d for %s %s" % (resp.status, method, path),
                                       status=resp.status)
        return resp.json()


def quote_segment(value):
    """Percent-encodes one path segment (ids, task ids, layer refs)."""
    if not isinstance(value, str) or not value:
        raise errors.InvalidArgument("expected a non-empty string, got %r" % (value,))
    return urllib.parse.quote(value, safe=":")


def query(**params):
    """Encodes query parameters (spaces as %20, '/' kept), skipping None."""
    items = [(k, v) for k, v in params.items() if v is not None]
    return urllib.parse.urlencode(items, quote_via=urllib.parse.quote, safe="/")

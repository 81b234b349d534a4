# SPDX-License-Identifier: Apache-2.0
"""An in-process stand-in for the node daemon, for unit tests of the SDK.

It serves HTTP/1.1 (keep-alive) on a unix socket in a temp dir, or on TCP
loopback, records every request exactly as received, and answers each with
the next scripted reply. It knows nothing of the API: tests assert the
requests and script the answers. A reply may also be raw bytes (for the
asyncio client's HTTP framing: chunk extensions, trailers, a body that
ends with the connection, a broken answer).
"""

import dataclasses
import http.server
import json
import os
import shutil
import socket
import socketserver
import sys
import tempfile
import threading
import urllib.parse
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class Request:
    method: str
    path: str        # without the query
    raw_path: str    # as sent, query included
    query: dict      # decoded: name -> list of values
    headers: dict    # lower-case names
    body: bytes
    connection: int  # which accepted connection carried it

    @property
    def json(self):
        return json.loads(self.body.decode("utf-8"))


@dataclasses.dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    chunks: list = None        # bytes, or threading.Event to wait on before the next chunk
    drop_after: bool = False   # close the connection after replying, without saying so
    raw: bytes = None          # sent verbatim instead of a response built from the above
    headers: dict = None       # extra response headers


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        with self.server.fake.lock:
            self.server.fake.connections += 1
            self.conn_no = self.server.fake.connections

    def log_message(self, fmt, *args):  # client_address is '' on AF_UNIX
        pass

    def _handle(self):
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parsed = urllib.parse.urlsplit(self.path)
        req = Request(method=self.command, path=urllib.parse.unquote(parsed.path),
                      raw_path=self.path,
                      query=urllib.parse.parse_qs(parsed.query, keep_blank_values=True),
                      headers={k.lower(): v for k, v in self.headers.items()},
                      body=body, connection=self.conn_no)
        with fake.lock:
            fake.requests.append(req)
            fake.arrived.notify_all()
            reply = fake.replies.popleft() if fake.replies else None
        if reply is None:
            reply = Reply(500, json.dumps({"error": {"code": "INTERNAL",
                                                     "message": "fake: no reply scripted"}}).encode())
        if reply.raw is not None:
            self.wfile.write(reply.raw)
            self.wfile.flush()
            self.close_connection = reply.drop_after
            return
        self.send_response(reply.status)
        for k, v in (reply.headers or {}).items():
            self.send_header(k, v)
        if reply.status != 204:
            self.send_header("Content-Type", reply.content_type)
        if reply.chunks is not None:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for c in reply.chunks:
                if isinstance(c, threading.Event):
                    self.wfile.flush()
                    if not c.wait(10):
                        with fake.lock:
                            fake.gate_timeouts += 1
                    continue
                self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        else:
            if reply.status != 204:
                self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if reply.status != 204:
                self.wfile.write(reply.body)
        self.wfile.flush()
        if reply.drop_after:
            self.close_connection = True

    def _handle_quietly(self):
        try:
            self._handle()
        except (BrokenPipeError, ConnectionResetError):  # the client hung up (tests do)
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle_quietly


class _UnixServer(http.server.ThreadingHTTPServer):
    address_family = socket.AF_UNIX
    daemon_threads = True

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)  # HTTPServer's wants (host, port)
        self.server_name = "localhost"
        self.server_port = 0


class _TcpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


class FakeDaemon:
    """Start with FakeDaemon() (unix) or FakeDaemon(tcp=True); stop with close()."""

    def __init__(self, tcp=False):
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.requests = []
        self.replies = deque()
        self.connections = 0
        self.gate_timeouts = 0   # chunk gates (threading.Event) that were never set
        self.tmpdir = tempfile.mkdtemp(prefix="dsec-sdk-fake-")
        if tcp:
            self.server = _TcpServer(("127.0.0.1", 0), _Handler)
            self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
            self.socket_path = None
        else:
            self.socket_path = os.path.join(self.tmpdir, "api.sock")
            self.server = _UnixServer(self.socket_path, _Handler)
            self.url = None
        self.server.fake = self
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def reply(self, status=200, obj=None, body=b"", content_type="application/json",
              chunks=None, drop_after=False, raw=None, headers=None):
        if obj is not None:
            body = json.dumps(obj).encode("utf-8")
        with self.lock:
            self.replies.append(Reply(status, body, content_type, chunks, drop_after, raw,
                                      headers))

    def error(self, status, code, message="fake error", field=None):
        err = {"code": code, "message": message}
        if field is not None:
            err["field"] = field
        self.reply(status, {"error": err})

    def wait_requests(self, n, timeout=10):
        """Waits until n requests have arrived; returns whether they did."""
        with self.lock:
            return self.arrived.wait_for(lambda: len(self.requests) >= n, timeout)

    def last(self):
        with self.lock:
            return self.requests[-1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def sandbox_obj(sid="sb-1", tier="container", state="running", **extra):
    obj = {"id": sid, "tier": tier, "state": state, "layers": ["base:bookworm"], "cpus": 1.0,
           "memory_mib": 512, "pids": 512, "qos": None, "qos_applied": False, "qos_reason": None,
           "placement": None, "task_id": None,
           "created_unix_ms": 1700000000000, "expires_unix_ms": None, "execs": 0,
           "network": None}
    obj.update(extra)
    return obj


def network_obj(allow=(), deny=(), address="10.201.0.2", gateway="10.201.0.1", counters=True,
                **over):
    """A sandbox's "network" as GET shows it (counters=None: being destroyed)."""
    if counters is True:
        counters = {"bytes_out": 0, "bytes_in": 0, "connects_allowed": 0, "connects_denied": 0,
                    "packets_dropped": 0}
    obj = {"egress": {"allow": list(allow), "deny": list(deny)}, "address": address,
           "addresses": [address] if address else [],
           "gateway": gateway, "nameserver": gateway, "counters": counters}
    obj.update(over)
    return obj


def exec_obj(**over):
    obj = {"exit_code": 0, "signal": None, "timed_out": False, "killed_by": None,
           "stdout": "", "stderr": "", "stdout_b64": "", "stderr_b64": "",
           "stdout_dropped": 0, "stderr_dropped": 0, "duration_ms": 1.5, "seq": None,
           "replayed": False, "divergence": None}
    obj.update(over)
    return obj

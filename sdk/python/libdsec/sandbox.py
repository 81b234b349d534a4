# SPDX-License-Identifier: Apache-2.0
"""Sandbox handles and streamed exec."""

import base64
import binascii
import http.client
import json

from . import errors
from ._transport import query, quote_segment
from .results import ExecResult, FileEntry

_DEFAULT_EXEC_SLACK_S = 600.0  # socket timeout for an exec without timeout_s


def exec_body(tier, argv_or_code, args=None, stdin=None, env=None, cwd=None,
              timeout_s=None, idempotent=False):
    """Builds the exec request body. A str is fncall code, a list an argv."""
    body = {}
    if isinstance(argv_or_code, str):
        if tier == "container":
            raise errors.InvalidArgument(
                "a container sandbox runs an argv list, not a code string; "
                "use ['sh', '-c', script] to run a shell script", field="code")
        body["code"] = argv_or_code
        if args is not None:
            body["argv"] = [str(a) for a in args]
    elif isinstance(argv_or_code, (list, tuple)):
        if args is not None:
            raise errors.InvalidArgument("args= goes with a code string, not an argv list",
                                         field="argv")
        if not argv_or_code or not all(isinstance(a, str) for a in argv_or_code):
            raise errors.InvalidArgument("argv must be a non-empty list of strings", field="argv")
        body["argv"] = list(argv_or_code)
    else:
        raise TypeError("exec takes a code str or an argv list, got %s"
                        % type(argv_or_code).__name__)
    if stdin is not None:
        if isinstance(stdin, str):
            body["stdin"] = stdin
        elif isinstance(stdin, (bytes, bytearray, memoryview)):
            body["stdin_b64"] = base64.b64encode(bytes(stdin)).decode("ascii")
        else:
            raise TypeError("stdin must be str or bytes, got %s" % type(stdin).__name__)
    if env is not None:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd is not None:
        body["cwd"] = cwd
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    if idempotent:
        body["idempotent"] = True
    return body


class ExecStream:
    """Iterates (stream, bytes) chunks of a running exec: stream is "stdout" or "stderr".

    Chunks arrive while the command runs. After the iteration ends, .result
    holds the ExecResult (stdout/stderr are the concatenated chunks) and
    .deferred_bytes how many output bytes the daemon could not send live
    (this client read slower than the command wrote, or the result was
    replayed) and sent after the command ended: nothing is lost either way.
    Use as a context manager, or iterate to the end; close() abandons the
    stream and drops the connection (the command runs on to its end).
    """

    def __init__(self, transport, conn, resp, method, path):
        self._transport = transport
        self._conn = conn
        self._resp = resp
        self._where = "%s %s" % (method, path)
        self._out = []
        self._err = []
        self.result = None
        self.deferred_bytes = None

    def __iter__(self):
        return self

    def __next__(self):
        if self._resp is None:
            raise StopIteration
        while True:
            try:
                line = self._resp.readline()
            except (OSError, http.client.HTTPException) as e:
                self._abandon()
                raise self._transport._fail("POST", self._where, e) from e
            if not line:
                self._abandon()
                raise errors.ProtocolError("%s: stream ended without an exit record" % self._where)
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as e:
                self._abandon()
                raise errors.ProtocolError("%s: bad stream line %r: %s" % (self._where, line[:200], e))
            if not isinstance(obj, dict):
                self._abandon()
                raise errors.ProtocolError("%s: stream line is not an object" % self._where)
            if "stream" in obj:
                try:
                    data = base64.b64decode(obj.get("data_b64") or "", validate=True)
                except (binascii.Error, TypeError) as e:
                    self._abandon()
                    raise errors.ProtocolError("%s: data_b64 is not base64: %s" % (self._where, e))
                stream = obj["stream"]
                (self._err if stream == "stderr" else self._out).append(data)
                return stream, data
            if "exit" in obj:
                self.result = ExecResult.from_json(obj["exit"], stdout=b"".join(self._out),
                                                   stderr=b"".join(self._err))
                self.deferred_bytes = int(obj.get("deferred_bytes") or 0)
                self._finish()
                raise StopIteration
            if "error" in obj:
                self._abandon()
                raise errors.error_from_object(obj, status=200)
            # Unknown line kinds are skipped: the daemon may add some later.

    def _finish(self):
        resp, self._resp = self._resp, None
        try:
            rest = resp.read()  # the terminating chunk
        except (OSError, http.client.HTTPException):
            self._transport.discard(self._conn)
            return
        self._transport.release(self._conn, not rest and not resp.will_close)

    def _abandon(self):
        if self._resp is not None:
            self._resp = None
            self._transport.discard(self._conn)

    def wait(self):
        """Consumes the rest of the stream and returns the ExecResult."""
        for _ in self:
            pass
        return self.result

    def close(self):
        self._abandon()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_resp", None) is not None:
            try:
                self._conn.close()
            except Exception:
                pass


class SandboxHandle:
    """A handle on one sandbox. Thread-safe as far as the daemon is: the
    handle holds no connection, only the id and the last known state."""

    def __init__(self, client, info):
        self._client = client
        self._update(info)

    def _update(self, info):
        if not isinstance(info, dict) or not isinstance(info.get("id"), str):
            raise errors.ProtocolError("sandbox object without an id: %r" % (info,))
        self.info = info
        self.id = info["id"]
        self.tier = info.get("tier")
        self.state = info.get("state")
        self.layers = info.get("layers")
        self.cpus = info.get("cpus")
        self.memory_mib = info.get("memory_mib")
        self.pids = info.get("pids")
        self.qos = info.get("qos")
        # Whether sched/ placed the sandbox by its qos, why not, and where:
        # {"qos", "cpus", "mems", "mechanism", "cgroup"} or None.
        self.qos_applied = bool(info.get("qos_applied", False))
        self.qos_reason = info.get("qos_reason")
        self.placement = info.get("placement")
        self.task_id = info.get("task_id")
        self.created_unix_ms = info.get("created_unix_ms")
        self.expires_unix_ms = info.get("expires_unix_ms")
        self.execs = info.get("execs")
        if "recorded" in info:
            self.recorded = info.get("recorded")
        elif not hasattr(self, "recorded"):
            self.recorded = None

    def __repr__(self):
        return "SandboxHandle(id=%r, tier=%r, state=%r)" % (self.id, self.tier, self.state)

    @property
    def _path(self):
        return "/v1/sandboxes/" + quote_segment(self.id)

    @property
    def _t(self):
        return self._client._transport

    def _exec_timeout(self, timeout_s):
        base = self._t.timeout or 60.0
        return base + (timeout_s if timeout_s is not None else _DEFAULT_EXEC_SLACK_S)

    # -- exec ---------------------------------------------------------------

    def exec(self, argv_or_code, stdin=None, env=None, cwd=None, timeout_s=None,
             idempotent=False, args=None):
        """Runs a command to completion and returns its ExecResult.

        A list is an argv (container tier); a str is code for the fncall tier
        (args= gives it extra arguments). stdin may be str or bytes.
        """
        body = exec_body(self.tier, argv_or_code, args, stdin, env, cwd, timeout_s, idempotent)
        obj = self._t.request_json("POST", self._path + "/exec", body,
                                   timeout=self._exec_timeout(timeout_s), expect=(200,))
        return ExecResult.from_json(obj)

    def exec_stream(self, argv_or_code, stdin=None, env=None, cwd=None, timeout_s=None,
                    idempotent=False, args=None):
        """Like exec, but returns an ExecStream yielding (stream, bytes) chunks
        while the command runs, then holding the ExecResult in .result."""
        body = exec_body(self.tier, argv_or_code, args, stdin, env, cwd, timeout_s, idempotent)
        path = self._path + "/exec/stream"
        conn, resp = self._t.open("POST", path, json.dumps(body).encode("utf-8"),
                                  accept="application/x-ndjson",
                                  timeout=self._exec_timeout(timeout_s))
        if resp.status >= 400:
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException):
                data = b""
            self._t.release(conn, not resp.will_close)
            raise errors.error_from_response(resp.status, data, resp.reason)
        return ExecStream(self._t, conn, resp, "POST", path)

    # -- files ----------------------------------------------------------------

    def read_file(self, path):
        """Returns the file's bytes (NotFound if it does not exist)."""
        resp = self._t.request("GET", "%s/files?%s" % (self._path, query(path=path)),
                               accept="application/octet-stream")
        return resp.body

    def write_file(self, path, data, mode=0o644):
        """Writes data (bytes, or str as UTF-8) to path, creating parent directories."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        elif not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data must be bytes or str, got %s" % type(data).__name__)
        if not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            raise errors.InvalidArgument("mode must be an int in 0..0o7777, got %r" % (mode,),
                                         field="mode")
        self._t.request("PUT", "%s/files?%s" % (self._path, query(path=path, mode="%04o" % mode)),
                        body=bytes(data), content_type="application/octet-stream")

    def list_files(self, path):
        """Returns the directory's entries as FileEntry values."""
        obj = self._t.request_json("GET", "%s/files/list?%s" % (self._path, query(path=path)))
        return [FileEntry.from_json(e) for e in obj.get("entries", [])]

    # -- lifecycle --------------------------------------------------------------

    def pack_diff(self, name, version):
        """Captures the sandbox's changes as layer name:version.

        Returns {"layer": "name:version", "digest": "sha256:...", "size_bytes": N}.
        """
        return self._t.request_json("POST", self._path + "/pack_diff",
                                    {"name": name, "version": version})

    def pause(self):
        self._update(self._t.request_json("POST", self._path + "/pause"))
        return self

    def resume(self):
        self._update(self._t.request_json("POST", self._path + "/resume"))
        return self

    def refresh(self):
        self._update(self._t.request_json("GET", self._path))
        return self

    def delete(self):
        self._t.request("DELETE", self._path)
        self.state = "deleted"

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.delete()
        except errors.NotFound:
            pass  # already gone (TTL, or deleted inside the block)
        except errors.DsecError:
            if exc_type is None:
                raise
        return False

# SPDX-License-Identifier: Apache-2.0
"""The daemon's API without I/O, shared by the blocking and the asyncio client.

Each endpoint is a function that returns a Call (method, target, body,
headers, which statuses are a success, how long to wait); the parse_*
functions and StreamDecoder turn answers into values. The blocking
transport (_transport.py, http.client) and the asyncio one
(_aio_transport.py, HTTP/1.1 on asyncio streams) only move the bytes, so
the JSON shapes, the checks made before sending and the error mapping
(errors.py) exist once.
"""

from __future__ import annotations

import base64
import binascii
import collections.abc
import dataclasses
import json
import math
import os
import urllib.parse
from typing import (IO, Any, Dict, List, Literal, Mapping, Optional, Protocol, Sequence, Tuple,
                    TypeVar, Union)

from . import errors
from .results import ExecResult, FileEntry, FileEvent, Forked, NetworkInfo
from .results import JSONObject as JSONObject  # re-exported

DEFAULT_SOCKET = "/run/dsec-vmm/api.sock"
EXEC_SLACK_S = 600.0          # socket timeout added to an exec without timeout_s
LAYER_BUILD_MIN_TIMEOUT_S = 600.0
NDJSON = "application/x-ndjson"

BytesLike = Union[bytes, bytearray, memoryview]
# What files.write() and exec stdin accept.
WriteData = Union[str, bytes, bytearray, memoryview, IO[bytes], IO[str]]
Stdin = Union[str, bytes, bytearray, memoryview]
# An argv list (container tier) or a code string (fncall tier).
Command = Union[str, Sequence[str]]
# A sandbox's network as the API writes it: {"egress": {"allow": [...], "deny": [...]}}.
NetworkSpec = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where the daemon is: a unix socket path, or host and port (TCP)."""

    socket_path: Optional[str]
    host: Optional[str]
    port: int
    name: str  # "unix:/run/dsec-vmm/api.sock" or "http://host:port", for messages

    @classmethod
    def resolve(cls, socket_path: Optional[str], url: Optional[str]) -> "Endpoint":
        """socket_path, else url (http://host:port), else $DSEC_SOCKET, else the default."""
        if url is not None and socket_path is not None:
            raise ValueError("give socket_path or url, not both")
        if url is not None:
            parsed = urllib.parse.urlsplit(url)
            if parsed.scheme != "http" or not parsed.hostname:
                raise ValueError("url must look like http://host:port, got %r" % url)
            if parsed.path not in ("", "/") or parsed.query:
                raise ValueError("url must not have a path or query: %r" % url)
            port = parsed.port or 80
            return cls(None, parsed.hostname, port, "http://%s:%d" % (parsed.hostname, port))
        path = socket_path or os.environ.get("DSEC_SOCKET") or DEFAULT_SOCKET
        return cls(path, None, 0, "unix:" + path)

    @property
    def host_header(self) -> str:
        return "localhost" if self.host is None else "%s:%d" % (self.host, self.port)


@dataclasses.dataclass(frozen=True)
class Call:
    """One request, built without I/O. expect: the success statuses whose
    body is JSON (204 means no body). The socket timeout is the client's,
    plus extra_timeout (an exec's own timeout) or at least min_timeout."""

    method: str
    target: str  # path and query, percent-encoded
    body: Optional[bytes] = None
    content_type: str = "application/json"
    accept: str = "application/json"
    expect: Tuple[int, ...] = (200, 201)
    extra_timeout: float = 0.0
    min_timeout: float = 0.0

    def timeout(self, base: Optional[float]) -> Optional[float]:
        if self.extra_timeout:
            return (base or 60.0) + self.extra_timeout
        if self.min_timeout:
            return max(base or 0.0, self.min_timeout)
        return base

    def headers(self, token: Optional[str]) -> Dict[str, str]:
        h = {"Accept": self.accept}
        if self.body is not None:
            h["Content-Type"] = self.content_type
        if token is not None:
            h["Authorization"] = "Bearer " + token
        return h


class Response:
    """A fully read answer: status, headers (lower-case names) and body bytes."""

    def __init__(self, status: int, reason: str, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise errors.ProtocolError(
                "answer is not JSON (%s): %r" % (e, self.body[:200]), status=self.status)


def raise_for_status(status: int, reason: str, body: bytes) -> None:
    if status >= 400:
        raise errors.error_from_response(status, body, reason)


def decode_json(call: Call, resp: Response) -> Any:
    """The JSON of a successful answer (None for 204); ProtocolError otherwise."""
    if resp.status == 204:
        return None
    if resp.status not in call.expect:
        raise errors.ProtocolError("unexpected HTTP %d for %s %s"
                                   % (resp.status, call.method, call.target), status=resp.status)
    return resp.json()


def json_object(value: Any, what: str) -> JSONObject:
    if not isinstance(value, dict):
        raise errors.ProtocolError("%s is not a JSON object: %r" % (what, value))
    return value


# -- encoding ----------------------------------------------------------------


def quote_segment(value: str) -> str:
    """Percent-encodes one path segment (ids, task ids, layer refs)."""
    if not isinstance(value, str) or not value:
        raise errors.InvalidArgument("expected a non-empty string, got %r" % (value,))
    return urllib.parse.quote(value, safe=":")


def query(**params: Optional[str]) -> str:
    """Encodes query parameters (spaces as %20, '/' kept), skipping None."""
    items = [(k, v) for k, v in params.items() if v is not None]
    return urllib.parse.urlencode(items, quote_via=urllib.parse.quote, safe="/")


def _json_call(method: str, target: str, obj: Optional[JSONObject] = None,
               **kw: Any) -> Call:
    body = None if obj is None else json.dumps(obj).encode("utf-8")
    return Call(method, target, body, **kw)


def whole_seconds(value: Optional[float], field: str) -> Optional[int]:
    """A duration in seconds as the API's integer, rounded up (0.5 s -> 1)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s must be a number of seconds, got %r" % (field, value))
    return value if isinstance(value, int) else int(math.ceil(value))


def _rules(value: Any, field: str) -> List[str]:
    """An egress rule list: a list (or tuple) of str; the syntax is the daemon's to judge."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise errors.InvalidArgument(
            "%s must be a list of rules such as ['pypi.org:443', '10.1.0.0/16'], got %r"
            % (field, value), field=field)
    for i, rule in enumerate(value):
        if not isinstance(rule, str):
            raise errors.InvalidArgument("%s[%d] must be a str, got %r" % (field, i, rule),
                                         field="%s[%d]" % (field, i))
    return list(value)


def egress_body(allow: Optional[Sequence[str]], deny: Optional[Sequence[str]],
                prefix: str = "") -> JSONObject:
    """{"egress": {"allow": [...], "deny": [...]}} with the lists given (one
    left None is not sent: the daemon takes it as empty)."""
    egress: JSONObject = {}
    if allow is not None:
        egress["allow"] = _rules(allow, prefix + "egress.allow")
    if deny is not None:
        egress["deny"] = _rules(deny, prefix + "egress.deny")
    return {"egress": egress}


def network_body(network: Optional[NetworkSpec], allow: Optional[Sequence[str]],
                 deny: Optional[Sequence[str]], prefix: str = "network.") -> Optional[JSONObject]:
    """A sandbox's network from network= (the API's object) or allow=/deny=
    (shorthand for {"egress": {"allow": allow, "deny": deny}}); None when
    neither is given (no network). Both at once is a TypeError. Only the
    types are checked here (rule lists are lists of str); the rules'
    syntax is the daemon's (InvalidArgument naming the field)."""
    if network is not None and (allow is not None or deny is not None):
        raise TypeError("give network= or allow=/deny=, not both")
    if network is None:
        return None if allow is None and deny is None else egress_body(allow, deny, prefix)
    if not isinstance(network, collections.abc.Mapping):
        raise errors.InvalidArgument(
            "%s must be a dict such as {'egress': {'allow': [...]}}, got %r"
            % (prefix.rstrip(".") or "network", network), field=prefix.rstrip(".") or None)
    body = dict(network)
    egress = body.get("egress")
    if isinstance(egress, collections.abc.Mapping):
        body["egress"] = dict(egress)
        for key in ("allow", "deny"):
            if egress.get(key) is not None:
                body["egress"][key] = _rules(egress[key], "%segress.%s" % (prefix, key))
    return body


def sandbox_body(tier: str, layers: Optional[Sequence[str]] = None, lang: Optional[str] = None,
                 cpus: Optional[float] = None, memory_mib: Optional[int] = None,
                 pids: Optional[int] = None, qos: Optional[str] = None,
                 ttl_s: Optional[int] = None, user_namespace: Optional[bool] = None,
                 task_id: Optional[str] = None,
                 network: Optional[JSONObject] = None) -> JSONObject:
    """The create (and task resume) body: only the fields given. network is
    already built (network_body); {} is sent (a network with nothing allowed)."""
    if not isinstance(tier, str) or not tier:
        raise errors.InvalidArgument("tier must be a string such as 'container' or 'fncall'",
                                     field="tier")
    if isinstance(layers, str):
        raise errors.InvalidArgument("layers must be a list of refs, e.g. ['base:bookworm']",
                                     field="layers")
    body: JSONObject = {"tier": tier}
    for key, value in (("layers", None if layers is None else list(layers)), ("lang", lang),
                       ("cpus", cpus), ("memory_mib", memory_mib), ("pids", pids),
                       ("qos", qos), ("ttl_s", ttl_s), ("user_namespace", user_namespace),
                       ("task_id", task_id), ("network", network)):
        if value is not None:
            body[key] = value
    return body


def create_body(tier: Optional[str], snapshot: Optional[str], layers: Optional[Sequence[str]],
                lang: Optional[str], cpus: Optional[float], memory_mib: Optional[int],
                pids: Optional[int], qos: Optional[str], ttl_s: Optional[int],
                user_namespace: Optional[bool], task_id: Optional[str],
                network: Optional[JSONObject]) -> JSONObject:
    """The create body: sandbox_body, or with snapshot= a sandbox made from
    that snapshot, beside which only ttl_s and task_id may be given (the
    snapshot decides the rest; anything else is a TypeError)."""
    if snapshot is None:
        return sandbox_body("container" if tier is None else tier, layers, lang, cpus,
                            memory_mib, pids, qos, ttl_s, user_namespace, task_id, network)
    if not isinstance(snapshot, str) or not snapshot:
        raise TypeError("snapshot must be a snapshot id (str), got %r" % (snapshot,))
    given = [name for name, value in (("tier", tier), ("layers", layers), ("lang", lang),
                                      ("cpus", cpus), ("memory_mib", memory_mib), ("pids", pids),
                                      ("qos", qos), ("user_namespace", user_namespace),
                                      ("network", network)) if value is not None]
    if given:
        raise TypeError("%s cannot be given with snapshot= (the snapshot decides it)"
                        % ", ".join(given))
    body: JSONObject = {"snapshot": snapshot}
    if ttl_s is not None:
        body["ttl_s"] = ttl_s
    if task_id is not None:
        body["task_id"] = task_id
    return body


def exec_body(tier: Optional[str], argv_or_code: Command, args: Optional[Sequence[Any]] = None,
              stdin: Optional[Stdin] = None, env: Optional[Mapping[str, Any]] = None,
              cwd: Optional[str] = None, timeout_s: Optional[int] = None,
              idempotent: bool = False) -> JSONObject:
    """Builds the exec request body. A str is fncall code, a list an argv."""
    body: JSONObject = {}
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


def command_body(tier: Optional[str], cmd: Command, *, timeout: Optional[float] = None,
                 cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
                 stdin: Optional[Stdin] = None, idempotent: bool = False) -> JSONObject:
    """The exec body of commands.run(): a str is a shell command on every
    tier with a shell (container, microvm: /bin/sh -c, as E2B runs one
    through a shell) and code in the sandbox's language on fncall; a list is
    an argv as with exec."""
    if isinstance(cmd, str) and tier is not None and tier != "fncall":
        cmd = ["/bin/sh", "-c", cmd]
    return exec_body(tier, cmd, None, stdin, envs, cwd, whole_seconds(timeout, "timeout"),
                     idempotent)


def file_bytes(data: WriteData) -> bytes:
    """What files.write() uploads: bytes as they are, str as UTF-8, a file object read."""
    read = getattr(data, "read", None)
    if not isinstance(data, (str, bytes, bytearray, memoryview)) and callable(read):
        data = read()
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError("data must be bytes, str or a file object, got %s" % type(data).__name__)


# -- endpoints ---------------------------------------------------------------


def sandbox_path(sandbox_id: str) -> str:
    return "/v1/sandboxes/" + quote_segment(sandbox_id)


def health() -> Call:
    return Call("GET", "/v1/health")


def metrics() -> Call:
    return Call("GET", "/metrics", accept="text/plain")


def create_sandbox(body: JSONObject) -> Call:
    return _json_call("POST", "/v1/sandboxes", body, expect=(201, 200))


def get_sandbox(sandbox_id: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id))


def list_sandboxes() -> Call:
    return Call("GET", "/v1/sandboxes")


def delete_sandbox(sandbox_id: str) -> Call:
    return Call("DELETE", sandbox_path(sandbox_id))


def exec_command(sandbox_id: str, body: JSONObject, stream: bool = False) -> Call:
    timeout_s = body.get("timeout_s")
    extra = float(timeout_s) if isinstance(timeout_s, (int, float)) else EXEC_SLACK_S
    if stream:
        return _json_call("POST", sandbox_path(sandbox_id) + "/exec/stream", body,
                          accept=NDJSON, expect=(200,), extra_timeout=extra)
    return _json_call("POST", sandbox_path(sandbox_id) + "/exec", body, expect=(200,),
                      extra_timeout=extra)


def read_file(sandbox_id: str, path: str) -> Call:
    return Call("GET", "%s/files?%s" % (sandbox_path(sandbox_id), query(path=path)),
                accept="application/octet-stream")


def write_file(sandbox_id: str, path: str, data: WriteData, mode: int = 0o644) -> Call:
    body = file_bytes(data)
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise errors.InvalidArgument("mode must be an int in 0..0o7777, got %r" % (mode,),
                                     field="mode")
    return Call("PUT", "%s/files?%s" % (sandbox_path(sandbox_id),
                                        query(path=path, mode="%04o" % mode)),
                body=body, content_type="application/octet-stream")


def list_files(sandbox_id: str, path: str) -> Call:
    return Call("GET", "%s/files/list?%s" % (sandbox_path(sandbox_id), query(path=path)))


# A quiet watch stream carries a keepalive line every 15 s: reads wait at
# least this long whatever the client's own timeout.
WATCH_READ_TIMEOUT_S = 60.0


def watch_dir(sandbox_id: str, path: str, recursive: bool = False) -> Call:
    if not isinstance(recursive, bool):
        raise errors.InvalidArgument("recursive must be a bool, got %r" % (recursive,),
                                     field="recursive")
    return Call("GET", "%s/files/watch?%s" % (sandbox_path(sandbox_id),
                                              query(path=path, recursive="true" if recursive else "false")),
                accept=NDJSON, expect=(200,), min_timeout=WATCH_READ_TIMEOUT_S)


def pack_diff(sandbox_id: str, name: str, version: str) -> Call:
    return _json_call("POST", sandbox_path(sandbox_id) + "/pack_diff",
                      {"name": name, "version": version})


def network_patch(network: Optional[NetworkSpec], allow: Optional[Sequence[str]],
                  deny: Optional[Sequence[str]]) -> JSONObject:
    """The body of PATCH .../network: network= as it is (the API's
    {"egress": ...}), else both lists, a list not given sent empty (the
    call replaces the whole policy)."""
    if network is None:
        return egress_body([] if allow is None else allow, [] if deny is None else deny)
    body = network_body(network, allow, deny, prefix="")
    assert body is not None
    return body


def set_network(sandbox_id: str, body: JSONObject) -> Call:
    """PATCH .../network: replaces the egress policy; answers the sandbox."""
    return _json_call("PATCH", sandbox_path(sandbox_id) + "/network", body, expect=(200,))


def fork(sandbox_id: str, count: int, ttl_s: Optional[int],
         task_ids: Optional[Sequence[str]] = None) -> Call:
    """POST .../fork: count new sandboxes from the sandbox (its machine where
    the tier can, else its files; 1..64);
    task_ids: one new task per child, whose log starts with the source's."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError("count must be an int, got %r" % (count,))
    body: JSONObject = {"count": count}
    if ttl_s is not None:
        body["ttl_s"] = ttl_s
    if task_ids is not None:
        if isinstance(task_ids, (str, bytes)) or not all(isinstance(t, str) for t in task_ids):
            raise TypeError("task_ids must be a list of str, got %r" % (task_ids,))
        body["task_ids"] = list(task_ids)
    return _json_call("POST", sandbox_path(sandbox_id) + "/fork", body, expect=(201,))


def parse_fork(obj: Any) -> Forked[JSONObject]:
    """The children of a fork answer, each as GET describes a sandbox, with
    how they were made (Forked.forked, .processes, .layer)."""
    answer = json_object(obj, "fork")
    return Forked([parse_sandbox(s) for s in answer.get("sandboxes", [])], answer)


def snapshot(sandbox_id: str) -> Call:
    """POST .../snapshot: the sandbox kept as a snapshot (its machine where
    the tier can, else its files); answers the snapshot ({"id": "snap-...",
    "captured": "machine"|"files", "processes", "source", ...})."""
    return _json_call("POST", sandbox_path(sandbox_id) + "/snapshot", {}, expect=(201,))


def list_snapshots() -> Call:
    return Call("GET", "/v1/snapshots")


def delete_snapshot(snapshot_id: str) -> Call:
    if not isinstance(snapshot_id, str) or not snapshot_id:
        raise TypeError("snapshot_id must be a str, got %r" % (snapshot_id,))
    return Call("DELETE", "/v1/snapshots/" + quote_segment(snapshot_id))


def parse_snapshot_list(obj: Any) -> List[JSONObject]:
    return list(json_object(obj, "snapshot list").get("snapshots", []))


def pause(sandbox_id: str) -> Call:
    return Call("POST", sandbox_path(sandbox_id) + "/pause")


def resume(sandbox_id: str) -> Call:
    return Call("POST", sandbox_path(sandbox_id) + "/resume")


def layers() -> Call:
    return Call("GET", "/v1/layers")


def build_layer(name: str, version: str, path: str, parent: Optional[str] = None) -> Call:
    body: JSONObject = {"name": name, "version": version, "path": path}
    if parent is not None:
        body["parent"] = parent
    return _json_call("POST", "/v1/layers", body, min_timeout=LAYER_BUILD_MIN_TIMEOUT_S)


def remove_layer(ref: str) -> Call:
    return Call("DELETE", "/v1/layers/" + quote_segment(ref))


def resume_task(task_id: str, body: JSONObject) -> Call:
    return _json_call("POST", "/v1/tasks/%s/resume" % quote_segment(task_id), body,
                      expect=(201, 200))


def task_log(task_id: str) -> Call:
    return Call("GET", "/v1/tasks/%s/log" % quote_segment(task_id))


def delete_task(task_id: str) -> Call:
    return Call("DELETE", "/v1/tasks/" + quote_segment(task_id))


# -- answers -----------------------------------------------------------------


def parse_sandbox(obj: Any) -> JSONObject:
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise errors.ProtocolError("sandbox object without an id: %r" % (obj,))
    return obj


def parse_sandbox_list(obj: Any) -> List[JSONObject]:
    return [parse_sandbox(s) for s in json_object(obj, "sandbox list").get("sandboxes", [])]


def parse_layer_list(obj: Any) -> List[JSONObject]:
    return list(json_object(obj, "layer list").get("layers", []))


def parse_file_list(obj: Any, directory: Optional[str] = None) -> List[FileEntry]:
    return [FileEntry.from_json(e, directory)
            for e in json_object(obj, "file list").get("entries", [])]


def parse_metrics(resp: Response) -> str:
    return resp.body.decode("utf-8", "replace")


def decode_text(data: bytes) -> str:
    """Text as the SDK gives it (command output, files.read format="text")."""
    return data.decode("utf-8", "replace")


FileFormat = Literal["text", "bytes"]


def check_format(format: str) -> FileFormat:
    """Refuses a files.read() format other than "text" or "bytes" (before sending)."""
    if format == "text":
        return "text"
    if format == "bytes":
        return "bytes"
    raise ValueError("format must be 'text' or 'bytes', got %r" % (format,))


def file_content(data: bytes, format: FileFormat) -> Union[str, bytes]:
    """files.read()'s answer in the format asked for."""
    return data if format == "bytes" else decode_text(data)


class SandboxFields:
    """The sandbox object's fields as attributes (SandboxHandle, AsyncSandbox)."""

    info: JSONObject
    id: str
    tier: Optional[str]
    state: Optional[str]
    ended_reason: Optional[str]
    layers: Optional[List[str]]
    cpus: Optional[float]
    memory_mib: Optional[int]
    pids: Optional[int]
    qos: Optional[str]
    qos_applied: bool
    qos_reason: Optional[str]
    placement: Optional[JSONObject]
    task_id: Optional[str]
    created_unix_ms: Optional[int]
    expires_unix_ms: Optional[int]
    execs: Optional[int]
    recorded: Optional[int]
    network: Optional[NetworkInfo]

    def _update(self, info: Any) -> None:
        info = parse_sandbox(info)
        self.info = info
        self.id = info["id"]
        self.tier = info.get("tier")
        # "running", "paused", or "ended" (its init died: ended_reason says
        # why; it runs nothing more and stays until deleted).
        self.state = info.get("state")
        self.ended_reason = info.get("ended_reason")
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
        # The sandbox's network: its policy, address, gateway and counters,
        # or None (created without one, or a daemon without networking).
        net = info.get("network")
        self.network = NetworkInfo.from_json(net) if net is not None else None
        if "recorded" in info:
            self.recorded = info.get("recorded")
        elif not hasattr(self, "recorded"):
            self.recorded = None


def _stream_line(where: str, line: bytes) -> Optional[JSONObject]:
    """One NDJSON line of a streamed answer as its object (None if blank)."""
    line = line.strip()
    if not line:
        return None
    try:
        obj = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise errors.ProtocolError("%s: bad stream line %r: %s" % (where, line[:200], e))
    if not isinstance(obj, dict):
        raise errors.ProtocolError("%s: stream line is not an object" % where)
    return obj


_T_co = TypeVar("_T_co", covariant=True)


class LineDecoder(Protocol[_T_co]):
    """What a streamed answer's reader needs of its decoder (StreamDecoder,
    WatchDecoder): a value (or None) per line, and the error for an end
    that came too soon."""

    def feed(self, line: bytes) -> Optional[_T_co]: ...

    def ended_early(self) -> errors.ProtocolError: ...


class WatchDecoder:
    """Decodes the watch stream's NDJSON lines (docs/api.yaml, files/watch).

    feed() returns a FileEvent for each change and None for the first line
    (which sets .watching), keepalives, blank lines and line kinds the
    daemon may add later. The error line that ends a watch raises it (as
    the API's error: NotFound when the directory went, Unavailable when
    the sandbox did); so do bad JSON and a malformed event.
    """

    def __init__(self, where: str) -> None:
        self._where = where
        self.watching: Optional[JSONObject] = None

    def feed(self, line: bytes) -> Optional[FileEvent]:
        obj = _stream_line(self._where, line)
        if obj is None:
            return None
        if "event" in obj:
            ev = obj["event"]
            if not isinstance(ev, dict) or not isinstance(ev.get("name"), str) \
                    or not isinstance(ev.get("type"), str):
                raise errors.ProtocolError("%s: malformed event %r" % (self._where, ev))
            return FileEvent(name=ev["name"], type=ev["type"])
        if "watching" in obj:
            self.watching = obj["watching"] if isinstance(obj["watching"], dict) else {}
            return None
        if "error" in obj:
            raise errors.error_from_object(obj, status=200)
        return None  # a keepalive ({}) or an unknown line kind

    def ended_early(self) -> errors.ProtocolError:
        return errors.ProtocolError("%s: the watch stream ended without its error line" % self._where)


class StreamDecoder:
    """Decodes the exec stream's NDJSON lines (docs/api.yaml, exec/stream).

    feed() returns each (stream, bytes) chunk; at the exit line it sets
    .result (stdout/stderr are the chunks joined) and .deferred_bytes and
    returns None, as it does for blank lines and line kinds the daemon may
    add later. An error line, bad JSON or bad base64 raise.
    """

    def __init__(self, where: str) -> None:
        self._where = where
        self._out: List[bytes] = []
        self._err: List[bytes] = []
        self.result: Optional[ExecResult] = None
        self.deferred_bytes: Optional[int] = None

    def feed(self, line: bytes) -> Optional[Tuple[str, bytes]]:
        obj = _stream_line(self._where, line)
        if obj is None:
            return None
        if "stream" in obj:
            try:
                data = base64.b64decode(obj.get("data_b64") or "", validate=True)
            except (binascii.Error, TypeError) as e:
                raise errors.ProtocolError("%s: data_b64 is not base64: %s" % (self._where, e))
            stream = str(obj["stream"])
            (self._err if stream == "stderr" else self._out).append(data)
            return stream, data
        if "exit" in obj:
            self.result = ExecResult.from_json(obj["exit"], stdout=b"".join(self._out),
                                               stderr=b"".join(self._err))
            self.deferred_bytes = int(obj.get("deferred_bytes") or 0)
            return None
        if "error" in obj:
            raise errors.error_from_object(obj, status=200)
        return None  # an unknown line kind: skipped

    def ended_early(self) -> errors.ProtocolError:
        return errors.ProtocolError("%s: stream ended without an exit record" % self._where)

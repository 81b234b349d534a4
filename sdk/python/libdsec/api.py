# SPDX-License-Identifier: Apache-2.0
"""The trainer-facing API (blocking): Sandbox and Task.

    sb = libdsec.Sandbox.create(tier="container", layers=["base:bookworm"])
    r = sb.commands.run("make test", on_stdout=print, timeout=300)
    print(r.exit_code, r.stdout)
    sb.kill()

Sandbox.create() / Sandbox.connect() follow E2B's Python SDK;
Sandbox(...) (creates on construction), sb.exec and sb.exec_stream are the
earlier API and stay. Both sit on Client (one method per endpoint). The
daemon is found through socket=, else url= (TCP, with token=), else
$DSEC_SOCKET, else the daemon's default socket (libdsec.DEFAULT_SOCKET).
"""

from __future__ import annotations

import secrets
from types import TracebackType
from typing import (Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Type,
                    TypeVar)

from . import _protocol as P
from . import errors
from ._protocol import Command, JSONObject, NetworkSpec, Stdin
from .client import Client
from .commands import Commands
from .files import Files
from .results import ExecResult, Forked, NetworkInfo
from .sandbox import ExecStream, SandboxHandle

_S = TypeVar("_S", bound="Sandbox")


def _client(client: Optional[Client], socket: Optional[str], url: Optional[str],
            token: Optional[str], timeout: Optional[float]) -> Tuple[Client, bool]:
    """Returns (client, owned): a given client is shared, else one is made."""
    if client is not None:
        if socket is not None or url is not None or token is not None:
            raise ValueError("give client= or socket=/url=/token=, not both")
        return client, False
    return Client(socket_path=socket, url=url, token=token, timeout=timeout), True


class Sandbox:
    """One sandbox. The tier is one parameter: "container" runs argv lists
    (and shell command strings in commands.run), "fncall" runs code strings
    (lang="python" by default, or "bash").

    Sandbox.create(...) makes one and Sandbox.connect(id) attaches to one
    (E2B's idiom); kill() deletes it, as does the end of a `with` block.
    Sandbox(...) also creates one: that constructor is kept for
    compatibility (its files.read() returns bytes by default; see Files).

    Arguments left None are not sent; the daemon applies its defaults (e.g.
    the default layers of the tier). task_id records every exec in that
    task's trajectory log (see Task for resuming it). user_namespace=True
    (container tier) runs it in a user namespace: root inside is an
    unprivileged host id range of its own. network= (or its shorthand
    allow=/deny=) gives it a network with an egress policy (see create).
    """

    handle: SandboxHandle
    files: Files
    commands: Commands

    def __init__(self, tier: str = "container", layers: Optional[Sequence[str]] = None,
                 qos: Optional[str] = None, socket: Optional[str] = None, *,
                 lang: Optional[str] = None, cpus: Optional[float] = None,
                 memory_mib: Optional[int] = None, pids: Optional[int] = None,
                 ttl_s: Optional[int] = None, task_id: Optional[str] = None,
                 url: Optional[str] = None, token: Optional[str] = None,
                 client: Optional[Client] = None, timeout: Optional[float] = 60.0,
                 user_namespace: Optional[bool] = None,
                 network: Optional[NetworkSpec] = None, allow: Optional[Sequence[str]] = None,
                 deny: Optional[Sequence[str]] = None,
                 _handle: Optional[SandboxHandle] = None) -> None:
        """Compatibility: creates the sandbox (prefer Sandbox.create()).
        timeout here is the socket timeout of each request (create()'s
        request_timeout), ttl_s the sandbox's lifetime (create()'s timeout)."""
        client_, owns = _client(client, socket, url, token, timeout)
        try:
            if _handle is None:
                _handle = client_.create(tier=tier, layers=layers, lang=lang, cpus=cpus,
                                         memory_mib=memory_mib, pids=pids, qos=qos,
                                         ttl_s=ttl_s, task_id=task_id,
                                         user_namespace=user_namespace, network=network,
                                         allow=allow, deny=deny)
        except BaseException:
            if owns:
                client_.close()
            raise
        self._attach(_handle, client_, owns, "bytes")

    def _attach(self, handle: SandboxHandle, client: Client, owns_client: bool,
                files_format: P.FileFormat) -> None:
        self._client, self._owns_client, self._closed = client, owns_client, False
        self.handle = handle
        self.files = Files(handle, files_format)
        self.commands = Commands(handle)

    @classmethod
    def _adopt(cls: Type[_S], handle: SandboxHandle, client: Client, owns_client: bool,
               files_format: P.FileFormat = "bytes") -> _S:
        sb = cls.__new__(cls)
        sb._attach(handle, client, owns_client, files_format)
        return sb

    # -- E2B's idiom --------------------------------------------------------

    @classmethod
    def create(cls: Type[_S], tier: Optional[str] = None, layers: Optional[Sequence[str]] = None,
               *, timeout: Optional[float] = None, qos: Optional[str] = None,
               lang: Optional[str] = None, cpus: Optional[float] = None,
               memory_mib: Optional[int] = None, pids: Optional[int] = None,
               task_id: Optional[str] = None, user_namespace: Optional[bool] = None,
               network: Optional[NetworkSpec] = None, allow: Optional[Sequence[str]] = None,
               deny: Optional[Sequence[str]] = None,
               socket: Optional[str] = None, url: Optional[str] = None,
               token: Optional[str] = None, client: Optional[Client] = None,
               request_timeout: Optional[float] = 60.0, snapshot: Optional[str] = None) -> _S:
        """Creates a sandbox and returns it (E2B: Sandbox.create()).

        tier: "container" unless given. snapshot: a snapshot id
        (sb.snapshot()): the sandbox continues from its saved machine,
        processes included (microvm), or starts from its files, with its
        settings; only timeout= and task_id= may be given beside it
        (TypeError).

        timeout: the sandbox's lifetime in seconds, as in E2B (the daemon
        deletes it then; sent as ttl_s, rounded up); None: no limit.
        request_timeout: the socket timeout of each request. The daemon is
        found through client=, socket=, url= and token= as for Client.

        network: the sandbox's network, as the API writes it:
        {"egress": {"allow": [rules], "deny": [rules]}} ({} is a network
        where nothing outside is allowed). allow=/deny= are shorthand for
        {"egress": {"allow": allow, "deny": deny}}; giving network= too is
        a TypeError. A rule is "CIDR[:port]" ("10.1.0.0/16:443",
        "[2001:db8::1]:443") or "domain[:port]" ("pypi.org:443",
        "*.debian.org"); the daemon judges them (InvalidArgument naming
        the field, e.g. "network.egress.allow[2]"). Without either the
        sandbox has no network at all (container tier only for now).
        """
        client_, owns = _client(client, socket, url, token, request_timeout)
        try:
            handle = client_.create(tier=tier, layers=layers, lang=lang, cpus=cpus,
                                    memory_mib=memory_mib, pids=pids, qos=qos,
                                    ttl_s=P.whole_seconds(timeout, "timeout"), task_id=task_id,
                                    user_namespace=user_namespace, network=network,
                                    allow=allow, deny=deny, snapshot=snapshot)
        except BaseException:
            if owns:
                client_.close()
            raise
        return cls._adopt(handle, client_, owns, "text")

    @classmethod
    def connect(cls: Type[_S], sandbox_id: str, *, socket: Optional[str] = None,
                url: Optional[str] = None, token: Optional[str] = None,
                client: Optional[Client] = None,
                request_timeout: Optional[float] = 60.0) -> _S:
        """Attaches to an existing sandbox (E2B: Sandbox.connect(id)).

        Raises NotFound if the daemon has no sandbox of that id. A paused
        sandbox stays paused (call resume()). kill() or the end of a `with`
        block deletes it, as for one this process created.
        """
        client_, owns = _client(client, socket, url, token, request_timeout)
        try:
            handle = client_.get(sandbox_id)
        except BaseException:
            if owns:
                client_.close()
            raise
        return cls._adopt(handle, client_, owns, "text")

    @property
    def sandbox_id(self) -> str:
        return self.handle.id

    def kill(self) -> bool:
        """Deletes the sandbox. True if this call deleted it, False if it was
        already gone (E2B's kill()). Closes a Client this object made."""
        if self._closed:
            return False
        self._closed = True
        try:
            self.handle.delete()
            return True
        except errors.NotFound:
            return False
        finally:
            if self._owns_client:
                self._client.close()

    def is_running(self) -> bool:
        """True if the daemon has the sandbox and it is not paused."""
        try:
            return self.handle.refresh().state == "running"
        except errors.NotFound:
            return False

    # -- what the sandbox is ------------------------------------------------

    @property
    def client(self) -> Client:
        return self._client

    @property
    def id(self) -> str:
        return self.handle.id

    @property
    def tier(self) -> Optional[str]:
        return self.handle.tier

    @property
    def state(self) -> Optional[str]:
        return self.handle.state

    @property
    def task_id(self) -> Optional[str]:
        return self.handle.task_id

    @property
    def qos_applied(self) -> bool:
        """True if the daemon placed the sandbox by its qos (sched/ cpuset)."""
        return self.handle.qos_applied

    @property
    def qos_reason(self) -> Optional[str]:
        """Why the qos was not applied (None when it was, or none was asked)."""
        return self.handle.qos_reason

    @property
    def placement(self) -> Optional[JSONObject]:
        """{"qos", "cpus", "mems", "mechanism", "cgroup"} when placed, else None."""
        return self.handle.placement

    @property
    def recorded(self) -> Optional[int]:
        """On a resumed sandbox: how many execs the task's log holds (else None)."""
        return self.handle.recorded

    @property
    def network(self) -> Optional[NetworkInfo]:
        """The sandbox's network (policy, address, gateway, counters) as of
        the last answer (refresh() for fresh counters); None without one."""
        return self.handle.network

    @property
    def info(self) -> JSONObject:
        return self.handle.info

    def __repr__(self) -> str:
        return "Sandbox(id=%r, tier=%r, state=%r)" % (self.id, self.tier, self.state)

    # -- operations -------------------------------------------------------------

    def exec(self, argv_or_code: Command, stdin: Optional[Stdin] = None,
             env: Optional[Mapping[str, Any]] = None, cwd: Optional[str] = None,
             timeout_s: Optional[int] = None, idempotent: bool = False,
             args: Optional[Sequence[Any]] = None) -> ExecResult:
        """Runs a command to completion; returns an ExecResult (.stdout, .stderr
        as bytes, .exit_code, .duration_s, ...). container: an argv list;
        fncall: a code string (args= are its arguments). The earlier API,
        kept; commands.run() is the E2B-shaped one."""
        return self.handle.exec(argv_or_code, stdin=stdin, env=env, cwd=cwd, timeout_s=timeout_s,
                                idempotent=idempotent, args=args)

    def exec_stream(self, argv_or_code: Command, **kw: Any) -> ExecStream:
        """Like exec, but yields (stream, bytes) as output arrives (ExecStream)."""
        return self.handle.exec_stream(argv_or_code, **kw)

    def pack_diff(self, name: Optional[str] = None, version: str = "1") -> JSONObject:
        """Captures the sandbox's changes as a new layer; returns {"layer",
        "digest", "size_bytes"}. name defaults to "diff-<sandbox id>-<random>".
        With a task_id, it is also the task's checkpoint for resume."""
        if name is None:
            name = "diff-%s-%s" % (self.id, secrets.token_hex(3))
        return self.handle.pack_diff(name, version)

    def fork(self: _S, count: int = 1, *, timeout: Optional[float] = None,
             task_ids: Optional[Sequence[str]] = None) -> Forked[_S]:
        """Forks the sandbox into count new ones (E2B: fork); this one runs
        on. microvm: each child continues from this sandbox's saved
        machine, its running processes included; other tiers: each starts
        from this sandbox's files with a writable layer of its own and no
        processes. The list's .forked ("machine" or "files") and
        .processes say which. timeout: each child's lifetime in seconds
        (None: no limit). task_ids: one new task per child, whose trajectory
        starts with this sandbox's (see Task: a resumed child replays that
        prefix). The children share this sandbox's client and read files as
        text; kill() each."""
        handles = self.handle.fork(count, P.whole_seconds(timeout, "timeout"), task_ids)
        return Forked([type(self)._adopt(h, self._client, False, "text") for h in handles],
                      {"forked": handles.forked, "processes": handles.processes, "layer": handles.layer,
                       "pause_ms": handles.pause_ms})

    def snapshot(self) -> str:
        """Keeps this sandbox as a snapshot and returns its id, for
        Sandbox.create(snapshot=id); this sandbox runs on. microvm: its
        whole machine, so that sandboxes made from it continue with its
        processes; other tiers: its files only. The snapshot stays
        on the node (it outlives the daemon) until
        Client.delete_snapshot(id)."""
        return str(self.handle.snapshot()["id"])

    def pause(self: _S) -> _S:
        """Freezes the sandbox (cgroup freezer); exec on it is a Conflict."""
        self.handle.pause()
        return self

    def resume(self: _S) -> _S:
        self.handle.resume()
        return self

    def refresh(self: _S) -> _S:
        self.handle.refresh()
        return self

    def set_network(self: _S, allow: Optional[Sequence[str]] = None,
                    deny: Optional[Sequence[str]] = None, *,
                    network: Optional[NetworkSpec] = None) -> _S:
        """Replaces the egress policy, for new connections at once (PATCH
        .../network); sb.network then shows it. The whole policy: a list
        not given is empty, so set_network() allows nothing. network= is
        the API's body ({"egress": {...}}) instead of allow=/deny=
        (TypeError with them). InvalidArgument (e.field
        "egress.allow[i]") for a bad rule; Conflict for a sandbox created
        without a network."""
        self.handle.set_network(allow, deny, network=network)
        return self

    def close(self) -> None:
        """Deletes the sandbox (once; a sandbox already gone is fine).

        Compatibility: the earlier name of kill(), which also says whether
        this call deleted it."""
        self.kill()

    delete = close

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        try:
            self.close()
        except errors.DsecError:
            if exc_type is None:
                raise
        return False


class Task:
    """A trajectory-log task: Task("job42-ep7").resume(tier=..., layers=...)
    returns a Sandbox in replay mode; .log() the recorded execs."""

    def __init__(self, task_id: str, socket: Optional[str] = None, *, url: Optional[str] = None,
                 token: Optional[str] = None, client: Optional[Client] = None,
                 timeout: Optional[float] = 60.0) -> None:
        if not isinstance(task_id, str) or not task_id:
            raise errors.InvalidArgument("task_id must be a non-empty string", field="task_id")
        self.task_id = task_id
        self._client, self._owns_client = _client(client, socket, url, token, timeout)

    @property
    def client(self) -> Client:
        return self._client

    def sandbox(self, tier: str = "container", layers: Optional[Sequence[str]] = None,
                qos: Optional[str] = None, **kw: Any) -> Sandbox:
        """A new sandbox recording into this task (Conflict if one is live)."""
        return Sandbox(tier=tier, layers=layers, qos=qos, task_id=self.task_id,
                       client=self._client, **kw)

    def resume(self, tier: str = "container", layers: Optional[Sequence[str]] = None,
               qos: Optional[str] = None, *, lang: Optional[str] = None,
               cpus: Optional[float] = None, memory_mib: Optional[int] = None,
               pids: Optional[int] = None, ttl_s: Optional[int] = None,
               network: Optional[NetworkSpec] = None, allow: Optional[Sequence[str]] = None,
               deny: Optional[Sequence[str]] = None) -> Sandbox:
        """Resumes the task in a fresh sandbox. Send its commands again in
        order: matching ones return the recorded result without running
        (result.replayed); the first that differs or is new runs live, with
        result.divergence saying where; the rest is live and recorded."""
        h = self._client.resume(self.task_id, tier=tier, layers=layers, lang=lang, cpus=cpus,
                                memory_mib=memory_mib, pids=pids, qos=qos, ttl_s=ttl_s,
                                network=network, allow=allow, deny=deny)
        return Sandbox._adopt(h, self._client, False)

    def log(self) -> JSONObject:
        """Returns {"records": [...], "checkpoints": [...]} (outputs as *_b64)."""
        return self._client.task_log(self.task_id)

    @property
    def records(self) -> List[Dict[str, Any]]:
        return list(self.log().get("records", []))

    def delete(self) -> None:
        self._client.delete_task(self.task_id)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> "Task":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return "Task(%r)" % self.task_id

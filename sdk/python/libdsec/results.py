# SPDX-License-Identifier: Apache-2.0
"""Value types returned by the client: ExecResult, CommandResult, Divergence, FileEntry,
NetworkInfo and NetworkCounters."""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any, Dict, Iterable, List, Optional, TypeVar

from . import errors

JSONObject = Dict[str, Any]


def _b64(obj: JSONObject, key: str, fallback_key: Optional[str] = None) -> bytes:
    value = obj.get(key)
    if value is None:
        text = obj.get(fallback_key) if fallback_key else None
        return text.encode("utf-8") if isinstance(text, str) else b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError) as e:
        raise errors.ProtocolError("%s is not base64: %s" % (key, e))


def _opt_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Where a resumed task stopped matching its recording and went live."""

    seq: int
    reason: str  # "differs" | "past-end"
    fields: List[str]
    not_reapplied: List[int]

    @classmethod
    def from_json(cls, obj: JSONObject) -> "Divergence":
        return cls(seq=int(obj.get("seq") or 0), reason=str(obj.get("reason") or ""),
                   fields=list(obj.get("fields") or []),
                   not_reapplied=list(obj.get("not_reapplied") or []))


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """The outcome of one exec. stdout/stderr are the exact bytes."""

    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    killed_by: Optional[str]  # None | "timeout" | "memory" | "output" | "pids"
    stdout: bytes
    stderr: bytes
    stdout_dropped: int
    stderr_dropped: int
    duration_ms: float
    seq: Optional[int]
    replayed: bool
    divergence: Optional[Divergence]
    raw: JSONObject = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, obj: Any, stdout: Optional[bytes] = None,
                  stderr: Optional[bytes] = None) -> "ExecResult":
        if not isinstance(obj, dict):
            raise errors.ProtocolError("exec result is not an object: %r" % (obj,))
        div = obj.get("divergence")
        return cls(
            exit_code=_opt_int(obj.get("exit_code")),
            signal=_opt_int(obj.get("signal")),
            timed_out=bool(obj.get("timed_out", False)),
            killed_by=obj.get("killed_by"),
            stdout=stdout if stdout is not None else _b64(obj, "stdout_b64", "stdout"),
            stderr=stderr if stderr is not None else _b64(obj, "stderr_b64", "stderr"),
            stdout_dropped=int(obj.get("stdout_dropped") or 0),
            stderr_dropped=int(obj.get("stderr_dropped") or 0),
            duration_ms=float(obj.get("duration_ms") or 0.0),
            seq=_opt_int(obj.get("seq")),
            replayed=bool(obj.get("replayed", False)),
            divergence=Divergence.from_json(div) if isinstance(div, dict) else None,
            raw=obj,
        )

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8, invalid bytes replaced."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def text(self) -> str:
        """Short for stdout_text."""
        return self.stdout_text

    @property
    def duration_s(self) -> float:
        return self.duration_ms / 1000.0

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0 and nothing killed it."""
        return (self.exit_code == 0 and self.signal is None and not self.timed_out
                and self.killed_by is None)

    def describe(self) -> str:
        if self.timed_out or self.killed_by == "timeout":
            how = "timed out"
        elif self.killed_by:
            how = "killed (%s limit)" % self.killed_by
        elif self.signal is not None:
            how = "killed by signal %d" % self.signal
        else:
            how = "exited with status %s" % self.exit_code
        return how

    def check(self) -> "ExecResult":
        """Returns self if ok, else raises ExecFailed carrying this result."""
        if self.ok:
            return self
        tail = self.stderr_text.strip()[-500:]
        msg = "command %s" % self.describe()
        if tail:
            msg += ": " + tail
        raise errors.ExecFailed(msg, self)


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """The result of sandbox.commands.run(), shaped like E2B's CommandResult.

    stdout/stderr are str: the output decoded as UTF-8 with invalid bytes
    replaced (U+FFFD), so they never raise; stdout_bytes/stderr_bytes are
    the exact bytes. exit_code is None when the command did not exit by
    itself (a signal, the timeout or a limit killed it); error then says
    how, and is None when the command exited (with any status). A non-zero
    exit is not an exception (E2B raises one): test .ok or call .check().
    exec_result is the full ExecResult (signal, killed_by, dropped bytes,
    duration, trajectory seq, replay).
    """

    exit_code: Optional[int]
    stdout: str
    stderr: str
    error: Optional[str]
    exec_result: ExecResult = dataclasses.field(repr=False)

    @classmethod
    def from_exec(cls, r: ExecResult) -> "CommandResult":
        exited = r.exit_code is not None and r.signal is None and not r.timed_out \
            and r.killed_by is None
        return cls(exit_code=r.exit_code, stdout=r.stdout_text, stderr=r.stderr_text,
                   error=None if exited else "command " + r.describe(), exec_result=r)

    @property
    def stdout_bytes(self) -> bytes:
        return self.exec_result.stdout

    @property
    def stderr_bytes(self) -> bytes:
        return self.exec_result.stderr

    @property
    def ok(self) -> bool:
        return self.exec_result.ok

    @property
    def duration_s(self) -> float:
        return self.exec_result.duration_s

    def check(self) -> "CommandResult":
        """Returns self if ok, else raises ExecFailed (e.result is the ExecResult)."""
        self.exec_result.check()
        return self


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One directory entry. path (the listed directory joined with name) is
    filled by files.list() and not part of equality."""

    name: str
    type: str  # "file" | "dir" | "symlink" | "other"
    size: int
    mode: int
    path: str = dataclasses.field(default="", compare=False)

    @classmethod
    def from_json(cls, obj: JSONObject, directory: Optional[str] = None) -> "FileEntry":
        mode = obj.get("mode", 0)
        if isinstance(mode, str):  # tolerate "0644"
            mode = int(mode, 8)
        name = obj.get("name")
        if not isinstance(name, str):
            raise errors.ProtocolError("file entry without a name: %r" % (obj,))
        path = ""
        if directory is not None:
            path = directory.rstrip("/") + "/" + name if directory != "/" else "/" + name
        return cls(name=name, type=str(obj.get("type") or "other"),
                   size=int(obj.get("size") or 0), mode=int(mode), path=path)


@dataclasses.dataclass(frozen=True)
class FileEvent:
    """One change under a watched directory (files.watch_dir): name is
    relative to the directory ("sub/f" below it); type is one of "create",
    "write", "remove", "rename" (the old name; the new one comes as a
    create) and "chmod"."""

    name: str
    type: str


def _str_list(value: Any) -> List[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _count(obj: JSONObject, key: str) -> int:
    value = _opt_int(obj.get(key))
    return 0 if value is None else value


@dataclasses.dataclass(frozen=True)
class NetworkCounters:
    """A networked sandbox's traffic so far (the egress policy's counters)."""

    bytes_out: int
    bytes_in: int
    connects_allowed: int   # connects and sends the policy let through
    connects_denied: int    # refused at once with EPERM
    packets_dropped: int    # dropped by the second wall (raw sockets, ICMP)

    @classmethod
    def from_json(cls, obj: JSONObject) -> "NetworkCounters":
        return cls(bytes_out=_count(obj, "bytes_out"), bytes_in=_count(obj, "bytes_in"),
                   connects_allowed=_count(obj, "connects_allowed"),
                   connects_denied=_count(obj, "connects_denied"),
                   packets_dropped=_count(obj, "packets_dropped"))


@dataclasses.dataclass(frozen=True)
class NetworkInfo:
    """A sandbox's network (sb.network; None for a sandbox created without one).

    allow / deny: the egress policy's rules as they were given (create or
    the last set_network); address: the sandbox's address in the node's
    subnet (fncall: its first worker's, None without a worker);
    addresses: all of them (fncall: one per worker); gateway: its next
    hop on the node, also its nameserver (the
    node's resolver, which answers only names the policy allows);
    counters: None while the sandbox is being destroyed. raw is the
    daemon's object as it came.
    """

    allow: List[str]
    deny: List[str]
    address: Optional[str]
    gateway: Optional[str]
    nameserver: Optional[str]
    counters: Optional[NetworkCounters]
    raw: JSONObject = dataclasses.field(repr=False, compare=False)
    addresses: List[str] = dataclasses.field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "NetworkInfo":
        if not isinstance(obj, dict):
            raise errors.ProtocolError("sandbox network is not an object: %r" % (obj,))
        egress = obj.get("egress")
        if not isinstance(egress, dict):
            egress = {}
        counters = obj.get("counters")

        def text(key: str) -> Optional[str]:
            value = obj.get(key)
            return value if isinstance(value, str) else None

        return cls(allow=_str_list(egress.get("allow")), deny=_str_list(egress.get("deny")),
                   address=text("address"), gateway=text("gateway"),
                   nameserver=text("nameserver"),
                   counters=NetworkCounters.from_json(counters)
                   if isinstance(counters, dict) else None,
                   raw=obj, addresses=_str_list(obj.get("addresses")))

    @property
    def egress(self) -> JSONObject:
        """The policy as the API writes it: {"allow": [...], "deny": [...]}."""
        return {"allow": list(self.allow), "deny": list(self.deny)}


_T = TypeVar("_T")


class Forked(List[_T]):
    """The children of a fork, a list, and how they were made.

    forked: "machine" (each child continues from the source's whole
    running machine, its processes included: the microvm tier) or "files"
    (the source's files only, no processes). processes: says which, and
    why processes were not carried. layer: the layer the source's files
    were packed into, or None (a machine fork without task_ids).
    pause_ms: how long the source stood still: while its machine was saved,
    or while its files were packed (a files fork; None from a daemon that
    does not say)."""

    def __init__(self, children: Iterable[_T], answer: JSONObject) -> None:
        super().__init__(children)
        self.forked = str(answer.get("forked", ""))
        self.processes = str(answer.get("processes", ""))
        layer = answer.get("layer")
        self.layer: Optional[str] = layer if isinstance(layer, str) else None
        pause = answer.get("pause_ms")
        self.pause_ms: Optional[float] = (float(pause) if isinstance(pause, (int, float))
                                          and not isinstance(pause, bool) else None)

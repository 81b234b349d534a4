# SPDX-License-Identifier: Apache-2.0
"""Value types returned by the client: ExecResult, Divergence, FileEntry."""

import base64
import binascii
import dataclasses
from typing import List, Optional

from . import errors


def _b64(obj, key, fallback_key=None):
    value = obj.get(key)
    if value is None:
        text = obj.get(fallback_key) if fallback_key else None
        return text.encode("utf-8") if isinstance(text, str) else b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError) as e:
        raise errors.ProtocolError("%s is not base64: %s" % (key, e))


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Where a resumed task stopped matching its recording and went live."""

    seq: int
    reason: str  # "differs" | "past-end"
    fields: List[str]
    not_reapplied: List[int]

    @classmethod
    def from_json(cls, obj):
        return cls(seq=obj.get("seq"), reason=obj.get("reason"),
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
    raw: dict = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, obj, stdout=None, stderr=None):
        if not isinstance(obj, dict):
            raise errors.ProtocolError("exec result is not an object: %r" % (obj,))
        div = obj.get("divergence")
        return cls(
            exit_code=obj.get("exit_code"),
            signal=obj.get("signal"),
            timed_out=bool(obj.get("timed_out", False)),
            killed_by=obj.get("killed_by"),
            stdout=stdout if stdout is not None else _b64(obj, "stdout_b64", "stdout"),
            stderr=stderr if stderr is not None else _b64(obj, "stderr_b64", "stderr"),
            stdout_dropped=int(obj.get("stdout_dropped") or 0),
            stderr_dropped=int(obj.get("stderr_dropped") or 0),
            duration_ms=float(obj.get("duration_ms") or 0.0),
            seq=obj.get("seq"),
            replayed=bool(obj.get("replayed", False)),
            divergence=Divergence.from_json(div) if isinstance(div, dict) else None,
            raw=obj,
        )

    @property
    def stdout_text(self):
        """stdout decoded as UTF-8, invalid bytes replaced."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self):
        return self.stderr.decode("utf-8", "replace")

    @property
    def text(self):
        """Short for stdout_text."""
        return self.stdout_text

    @property
    def duration_s(self):
        return self.duration_ms / 1000.0

    @property
    def ok(self):
        """True when the command exited with status 0 and nothing killed it."""
        return (self.exit_code == 0 and self.signal is None and not self.timed_out
                and self.killed_by is None)

    def describe(self):
        if self.timed_out or self.killed_by == "timeout":
            how = "timed out"
        elif self.killed_by:
            how = "killed (%s limit)" % self.killed_by
        elif self.signal is not None:
            how = "killed by signal %d" % self.signal
        else:
            how = "exited with status %s" % self.exit_code
        return how

    def check(self):
        """Returns self if ok, else raises ExecFailed carrying this result."""
        if self.ok:
            return self
        tail = self.stderr_text.strip()[-500:]
        msg = "command %s" % self.describe()
        if tail:
            msg += ": " + tail
        raise errors.ExecFailed(msg, self)


@dataclasses.dataclass(frozen=True)
class FileEntry:
    name: str
    type: str  # "file" | "dir" | "symlink" | "other"
    size: int
    mode: int

    @classmethod
    def from_json(cls, obj):
        mode = obj.get("mode", 0)
        if isinstance(mode, str):  # tolerate "0644"
            mode = int(mode, 8)
        return cls(name=obj.get("name"), type=obj.get("type"),
                   size=int(obj.get("size") or 0), mode=int(mode))

# SPDX-License-Identifier: Apache-2.0
"""Sandbox handles and streamed exec (the blocking client)."""

from __future__ import annotations

import http.client
from types import TracebackType
from typing import (TYPE_CHECKING, Any, Generic, Iterator, List, Literal, Mapping, Optional,
                    Sequence, Tuple, Type, TypeVar)

from . import _protocol as P
from . import errors
from ._protocol import Command, JSONObject, NetworkSpec, Stdin, WriteData
from ._protocol import exec_body  # noqa: F401  (kept importable from here)
from .results import ExecResult, FileEntry, FileEvent, Forked

if TYPE_CHECKING:
    from ._transport import Transport
    from .client import Client


_T = TypeVar("_T")


class _LineStream(Generic[_T]):
    """An NDJSON answer read line by line, on its own connection (ExecStream,
    DirWatch): a failed read or a premature end drops the connection and
    raises; close() drops it."""

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse, method: str, path: str,
                 lines: P.LineDecoder[_T]) -> None:
        self._transport = transport
        self._conn = conn
        self._resp: Optional[http.client.HTTPResponse] = resp
        self._method = method
        self._path = path
        self._lines = lines

    def _next_fed(self) -> Optional[_T]:
        """The decoder's value for the next line (None for a line without one)."""
        assert self._resp is not None
        try:
            line = self._resp.readline()
        except (OSError, http.client.HTTPException) as e:
            self._abandon()
            raise self._transport._fail(self._method, self._path, e) from e
        if not line:
            self._abandon()
            raise self._lines.ended_early()
        try:
            return self._lines.feed(line)
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        if self._resp is not None:
            self._resp = None
            self._transport.discard(self._conn)

    def close(self) -> None:
        self._abandon()

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        self.close()
        return False

    def __del__(self) -> None:
        if getattr(self, "_resp", None) is not None:
            try:
                self._conn.close()
            except Exception:
                pass


class DirWatch(_LineStream[FileEvent]):
    """Iterates the changes under a watched directory (FileEvent values) as
    they happen, waiting for the next one without limit (the daemon keeps
    a quiet stream alive). The watch ends with its error raised from the
    iteration: NotFound (the directory was removed or moved), Unavailable
    (the sandbox was deleted or the daemon stopped), ResourceExhausted
    (events were lost, or more than 1,024 directories). close() (or
    leaving `with`) ends it. Blocking; for a background watch, iterate on
    a thread of your own.
    """

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse, method: str, path: str) -> None:
        super().__init__(transport, conn, resp, method, path, P.WatchDecoder("%s %s" % (method, path)))

    def __iter__(self) -> Iterator[FileEvent]:
        return self

    def __next__(self) -> FileEvent:
        while self._resp is not None:
            event = self._next_fed()
            if event is not None:
                return event
        raise StopIteration

    def __enter__(self) -> "DirWatch":
        return self


class ExecStream(_LineStream[Tuple[str, bytes]]):
    """Iterates (stream, bytes) chunks of a running exec: stream is "stdout" or "stderr".

    Chunks arrive while the command runs. After the iteration ends, .result
    holds the ExecResult (stdout/stderr are the concatenated chunks) and
    .deferred_bytes how many output bytes the daemon could not send live
    (this client read slower than the command wrote, or the result was
    replayed) and sent after the command ended: nothing is lost either way.
    Use as a context manager, or iterate to the end; close() abandons the
    stream and drops the connection (the command runs on to its end).
    """

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse, method: str, path: str) -> None:
        self._decoder = P.StreamDecoder("%s %s" % (method, path))
        super().__init__(transport, conn, resp, method, path, self._decoder)

    @property
    def result(self) -> Optional[ExecResult]:
        return self._decoder.result

    @property
    def deferred_bytes(self) -> Optional[int]:
        return self._decoder.deferred_bytes

    def __iter__(self) -> Iterator[Tuple[str, bytes]]:
        return self

    def __next__(self) -> Tuple[str, bytes]:
        while self._resp is not None:
            chunk = self._next_fed()
            if chunk is not None:
                return chunk
            if self._decoder.result is not None:
                self._finish()
        raise StopIteration

    def _finish(self) -> None:
        resp, self._resp = self._resp, None
        assert resp is not None
        try:
            rest = resp.read()  # the terminating chunk
        except (OSError, http.client.HTTPException):
            self._transport.discard(self._conn)
            return
        self._transport.release(self._conn, not rest and not resp.will_close)

    def wait(self) -> Optional[ExecResult]:
        """Consumes the rest of the stream and returns the ExecResult."""
        for _ in self:
            pass
        return self.result

    def __enter__(self) -> "ExecStream":
        return self


class SandboxHandle(P.SandboxFields):
    """A handle on one sandbox. Thread-safe as far as the daemon is: the
    handle holds no connection, only the id and the last known state."""

    def __init__(self, client: "Client", info: Any) -> None:
        self._client = client
        self._update(info)

    def __repr__(self) -> str:
        return "SandboxHandle(id=%r, tier=%r, state=%r)" % (self.id, self.tier, self.state)

    @property
    def _t(self) -> "Transport":
        return self._client._transport

    # -- exec ---------------------------------------------------------------

    def exec(self, argv_or_code: Command, stdin: Optional[Stdin] = None,
             env: Optional[Mapping[str, Any]] = None, cwd: Optional[str] = None,
             timeout_s: Optional[int] = None, idempotent: bool = False,
             args: Optional[Sequence[Any]] = None) -> ExecResult:
        """Runs a command to completion and returns its ExecResult.

        A list is an argv (container tier); a str is code for the fncall tier
        (args= gives it extra arguments). stdin may be str or bytes.
        """
        body = P.exec_body(self.tier, argv_or_code, args, stdin, env, cwd, timeout_s, idempotent)
        return self.exec_body(body)

    def exec_body(self, body: JSONObject) -> ExecResult:
        """Runs a prepared exec request body (see _protocol.exec_body)."""
        return ExecResult.from_json(self._t.send_json(P.exec_command(self.id, body)))

    def exec_stream(self, argv_or_code: Command, stdin: Optional[Stdin] = None,
                    env: Optional[Mapping[str, Any]] = None, cwd: Optional[str] = None,
                    timeout_s: Optional[int] = None, idempotent: bool = False,
                    args: Optional[Sequence[Any]] = None) -> ExecStream:
        """Like exec, but returns an ExecStream yielding (stream, bytes) chunks
        while the command runs, then holding the ExecResult in .result."""
        body = P.exec_body(self.tier, argv_or_code, args, stdin, env, cwd, timeout_s, idempotent)
        return self.exec_stream_body(body)

    def exec_stream_body(self, body: JSONObject) -> ExecStream:
        call = P.exec_command(self.id, body, stream=True)
        conn, resp = self._t.open_stream(call)
        return ExecStream(self._t, conn, resp, call.method, call.target)

    # -- files ----------------------------------------------------------------

    def read_file(self, path: str) -> bytes:
        """Returns the file's bytes (NotFound if it does not exist)."""
        return self._t.send(P.read_file(self.id, path)).body

    def write_file(self, path: str, data: WriteData, mode: int = 0o644) -> None:
        """Writes data (bytes, or str as UTF-8) to path, creating parent directories."""
        self._t.send(P.write_file(self.id, path, data, mode))

    def list_files(self, path: str) -> List[FileEntry]:
        """Returns the directory's entries as FileEntry values."""
        return P.parse_file_list(self._t.send_json(P.list_files(self.id, path)), path)

    def watch_dir(self, path: str, recursive: bool = False) -> "DirWatch":
        """Watches a directory: a DirWatch iterating its changes (FileEvent)."""
        call = P.watch_dir(self.id, path, recursive)
        conn, resp = self._t.open_stream(call)
        return DirWatch(self._t, conn, resp, call.method, call.target)

    # -- lifecycle --------------------------------------------------------------

    def pack_diff(self, name: str, version: str) -> JSONObject:
        """Captures the sandbox's changes as layer name:version.

        Returns {"layer": "name:version", "digest": "sha256:...", "size_bytes": N}.
        """
        return P.json_object(self._t.send_json(P.pack_diff(self.id, name, version)), "pack_diff")

    def fork(self, count: int = 1, ttl_s: Optional[int] = None,
             task_ids: Optional[Sequence[str]] = None) -> Forked["SandboxHandle"]:
        """Makes count new sandboxes from this one, which runs on: where the
        tier can (microvm), each continues from this one's saved machine,
        processes included; elsewhere each gets this one's files (its
        writable layer packed once into a layer under each) and no
        processes. The answer's .forked ("machine" or "files") and
        .processes say which. task_ids: a new task per child, whose
        trajectory starts with this sandbox's (a resumed child replays it).
        Returns their handles (same client)."""
        children = P.parse_fork(self._t.send_json(P.fork(self.id, count, ttl_s, task_ids)))
        return Forked([SandboxHandle(self._client, info) for info in children],
                      {"forked": children.forked, "processes": children.processes,
                       "layer": children.layer, "pause_ms": children.pause_ms})

    def snapshot(self) -> JSONObject:
        """Keeps this sandbox as a snapshot that new sandboxes start from
        (Client.create(snapshot=...)); this one runs on. Its whole machine,
        processes included, where the tier can (microvm: "captured":
        "machine"); elsewhere its files ("captured": "files"). Returns the
        snapshot: {"id": "snap-...", "captured", "processes", ...}."""
        return P.json_object(self._t.send_json(P.snapshot(self.id)), "snapshot")

    def pause(self) -> "SandboxHandle":
        self._update(self._t.send_json(P.pause(self.id)))
        return self

    def resume(self) -> "SandboxHandle":
        self._update(self._t.send_json(P.resume(self.id)))
        return self

    def refresh(self) -> "SandboxHandle":
        self._update(self._t.send_json(P.get_sandbox(self.id)))
        return self

    def set_network(self, allow: Optional[Sequence[str]] = None,
                    deny: Optional[Sequence[str]] = None, *,
                    network: Optional[NetworkSpec] = None) -> "SandboxHandle":
        """Replaces the sandbox's egress policy (PATCH .../network), for new
        connections at once; .network then shows it. A list not given is
        empty: set_network() allows nothing. network= is the API's body
        ({"egress": {...}}) instead of allow=/deny= (TypeError with them).
        InvalidArgument (e.field "egress.allow[i]") for a bad rule,
        Conflict for a sandbox created without a network."""
        body = P.network_patch(network, allow, deny)
        self._update(self._t.send_json(P.set_network(self.id, body)))
        return self

    def delete(self) -> None:
        self._t.send(P.delete_sandbox(self.id))
        self.state = "deleted"

    def __enter__(self) -> "SandboxHandle":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        try:
            self.delete()
        except errors.NotFound:
            pass  # already gone (TTL, or deleted inside the block)
        except errors.DsecError:
            if exc_type is None:
                raise
        return False

# SPDX-License-Identifier: Apache-2.0
"""The asyncio client: AsyncSandbox (E2B's AsyncSandbox idiom) and AsyncClient.

    async with await AsyncSandbox.create(tier="container", layers=["base:bookworm"]) as sb:
        r = await sb.commands.run("make test", on_stdout=print)
        await sb.files.write("/work/a.txt", "hi")
        print(r.exit_code, await sb.files.read("/work/a.txt"))

Requests, answers and errors are the blocking client's (_protocol.py,
errors.py); only the transport differs (_aio_transport.py: HTTP/1.1 on
asyncio streams, standard library only). An AsyncClient and the sandboxes
made through it belong to one event loop at a time.
"""

from __future__ import annotations

import inspect
import secrets
from types import TracebackType
from typing import (Any, Generic, List, Literal, Mapping, Optional, Sequence, Tuple, Type,
                    TypeVar, Union, overload)

from . import _protocol as P
from . import errors
from ._aio_transport import AsyncTransport, StreamResponse
from ._protocol import Command, JSONObject, NetworkSpec, Stdin, WriteData
from .commands import OutputDispatch, OutputHandler
from .results import CommandResult, ExecResult, FileEntry, FileEvent, Forked

_A = TypeVar("_A", bound="AsyncSandbox")
_T = TypeVar("_T")


class _AsyncLineStream(Generic[_T]):
    """An NDJSON answer read line by line (AsyncExecStream, AsyncDirWatch):
    a failed read or a premature end drops the connection and raises;
    aclose() drops it."""

    def __init__(self, resp: StreamResponse, lines: P.LineDecoder[_T]) -> None:
        self._resp: Optional[StreamResponse] = resp
        self._lines = lines

    async def _next_fed(self) -> Optional[_T]:
        """The decoder's value for the next line (None for a line without one)."""
        assert self._resp is not None
        line = await self._resp.readline()  # abandons the connection itself on failure
        if not line:
            self._abandon()
            raise self._lines.ended_early()
        try:
            return self._lines.feed(line)
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.abandon()

    async def aclose(self) -> None:
        self._abandon()

    async def __aexit__(self, *exc: object) -> Literal[False]:
        self._abandon()
        return False


class AsyncExecStream(_AsyncLineStream[Tuple[str, bytes]]):
    """Async-iterates (stream, bytes) chunks of a running exec, like ExecStream.

    After the iteration ends, .result is the ExecResult and .deferred_bytes
    the output the daemon sent after the command ended. aclose() (or
    leaving `async with` early) drops the connection; the command runs on
    to its end on the daemon.
    """

    def __init__(self, resp: StreamResponse, call: P.Call) -> None:
        self._decoder = P.StreamDecoder("%s %s" % (call.method, call.target))
        super().__init__(resp, self._decoder)

    @property
    def result(self) -> Optional[ExecResult]:
        return self._decoder.result

    @property
    def deferred_bytes(self) -> Optional[int]:
        return self._decoder.deferred_bytes

    def __aiter__(self) -> "AsyncExecStream":
        return self

    async def __anext__(self) -> Tuple[str, bytes]:
        while self._resp is not None:
            chunk = await self._next_fed()
            if chunk is not None:
                return chunk
            if self._decoder.result is not None:
                resp, self._resp = self._resp, None
                await resp.finish()
        raise StopAsyncIteration

    async def wait(self) -> Optional[ExecResult]:
        """Consumes the rest of the stream and returns the ExecResult."""
        async for _ in self:
            pass
        return self.result

    async def __aenter__(self) -> "AsyncExecStream":
        return self


class AsyncDirWatch(_AsyncLineStream[FileEvent]):
    """Async-iterates the changes under a watched directory, like DirWatch
    (the watch's end raises its error); aclose() or leaving `async with`
    ends it."""

    def __init__(self, resp: StreamResponse, call: P.Call) -> None:
        super().__init__(resp, P.WatchDecoder("%s %s" % (call.method, call.target)))

    def __aiter__(self) -> "AsyncDirWatch":
        return self

    async def __anext__(self) -> FileEvent:
        while self._resp is not None:
            event = await self._next_fed()
            if event is not None:
                return event
        raise StopAsyncIteration

    async def __aenter__(self) -> "AsyncDirWatch":
        return self


class AsyncFiles:
    """sb.files of an AsyncSandbox: as Files, awaited; read() defaults to "text"."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @overload
    async def read(self, path: str, format: Literal["text"] = "text") -> str: ...

    @overload
    async def read(self, path: str, format: Literal["bytes"]) -> bytes: ...

    async def read(self, path: str, format: P.FileFormat = "text") -> Union[str, bytes]:
        """The file's content as str (UTF-8, invalid bytes replaced) or bytes."""
        fmt = P.check_format(format)
        data = (await self._sb._t.send(P.read_file(self._sb.id, path))).body
        return P.file_content(data, fmt)

    async def write(self, path: str, data: WriteData, mode: int = 0o644) -> None:
        """Writes bytes, str (as UTF-8) or a file object's content, creating parents."""
        await self._sb._t.send(P.write_file(self._sb.id, path, data, mode))

    async def list(self, path: str) -> List[FileEntry]:
        obj = await self._sb._t.send_json(P.list_files(self._sb.id, path))
        return P.parse_file_list(obj, path)

    async def watch_dir(self, path: str, recursive: bool = False) -> AsyncDirWatch:
        """As Files.watch_dir: an AsyncDirWatch of the directory's changes."""
        call = P.watch_dir(self._sb.id, path, recursive)
        return AsyncDirWatch(await self._sb._t.open_stream(call), call)


class AsyncCommands:
    """sb.commands of an AsyncSandbox: as Commands, awaited."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    async def run(self, cmd: Command, *, timeout: Optional[float] = None,
                  cwd: Optional[str] = None, envs: Optional[Mapping[str, str]] = None,
                  stdin: Optional[Stdin] = None, on_stdout: Optional[OutputHandler] = None,
                  on_stderr: Optional[OutputHandler] = None,
                  idempotent: bool = False) -> CommandResult:
        """As Commands.run; on_stdout/on_stderr may be plain functions or
        coroutine functions (awaited before the next output is read)."""
        body = P.command_body(self._sb.tier, cmd, timeout=timeout, cwd=cwd, envs=envs,
                              stdin=stdin, idempotent=idempotent)
        if on_stdout is None and on_stderr is None:
            return CommandResult.from_exec(await self._sb.exec_body(body))
        dispatch = OutputDispatch(on_stdout, on_stderr)
        async with await self._sb.exec_stream_body(body) as stream:
            async for name, data in stream:
                for handler, text in dispatch.feed(name, data):
                    await _call(handler, text)
            for handler, text in dispatch.flush():
                await _call(handler, text)
            result = stream.result
        assert result is not None  # the iteration ends only at the exit line
        return CommandResult.from_exec(result)


async def _call(handler: OutputHandler, text: str) -> None:
    ret = handler(text)
    if inspect.isawaitable(ret):
        await ret


class AsyncClient:
    """The asyncio client of one daemon: as Client, awaited.

    AsyncClient(socket_path=...) or AsyncClient(url=..., token=...); timeout
    bounds each request (an exec's own timeout is added). Keeps up to
    max_idle idle keep-alive connections; concurrent requests each use
    their own. Close it with `await client.close()` or `async with`.
    """

    def __init__(self, socket_path: Optional[str] = None, url: Optional[str] = None,
                 token: Optional[str] = None, timeout: Optional[float] = 60.0,
                 max_idle: int = 8) -> None:
        self._transport = AsyncTransport(socket_path, url, token, timeout, max_idle)

    @property
    def endpoint(self) -> str:
        return self._transport.endpoint

    def __repr__(self) -> str:
        return "AsyncClient(%s)" % self.endpoint

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> Literal[False]:
        await self.close()
        return False

    async def health(self) -> JSONObject:
        return P.json_object(await self._transport.send_json(P.health()), "health")

    async def metrics(self) -> str:
        return P.parse_metrics(await self._transport.send(P.metrics()))

    async def create(self, tier: Optional[str] = None, layers: Optional[Sequence[str]] = None,
                     lang: Optional[str] = None, cpus: Optional[float] = None,
                     memory_mib: Optional[int] = None, pids: Optional[int] = None,
                     qos: Optional[str] = None, ttl_s: Optional[int] = None,
                     task_id: Optional[str] = None,
                     user_namespace: Optional[bool] = None, *,
                     network: Optional[NetworkSpec] = None,
                     allow: Optional[Sequence[str]] = None,
                     deny: Optional[Sequence[str]] = None,
                     snapshot: Optional[str] = None) -> "AsyncSandbox":
        """Creates a sandbox (as Client.create); it does not own this client."""
        body = P.create_body(tier, snapshot, layers, lang, cpus, memory_mib, pids, qos, ttl_s,
                             user_namespace, task_id, P.network_body(network, allow, deny))
        return AsyncSandbox(self, await self._transport.send_json(P.create_sandbox(body)))

    async def get(self, sandbox_id: str) -> "AsyncSandbox":
        return AsyncSandbox(self, await self._transport.send_json(P.get_sandbox(sandbox_id)))

    async def list(self) -> List["AsyncSandbox"]:
        obj = await self._transport.send_json(P.list_sandboxes())
        return [AsyncSandbox(self, s) for s in P.parse_sandbox_list(obj)]

    async def delete(self, sandbox_id: str) -> None:
        await self._transport.send(P.delete_sandbox(sandbox_id))

    async def layers(self) -> List[JSONObject]:
        return P.parse_layer_list(await self._transport.send_json(P.layers()))

    async def snapshots(self) -> List[JSONObject]:
        """As Client.snapshots."""
        return P.parse_snapshot_list(await self._transport.send_json(P.list_snapshots()))

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self._transport.send(P.delete_snapshot(snapshot_id))

    async def build_layer(self, name: str, version: str, path: str,
                          parent: Optional[str] = None) -> Any:
        return await self._transport.send_json(P.build_layer(name, version, path, parent))

    async def remove_layer(self, ref: str) -> None:
        await self._transport.send(P.remove_layer(ref))

    async def resume(self, task_id: str, tier: str = "container",
                     layers: Optional[Sequence[str]] = None, lang: Optional[str] = None,
                     cpus: Optional[float] = None, memory_mib: Optional[int] = None,
                     pids: Optional[int] = None, qos: Optional[str] = None,
                     ttl_s: Optional[int] = None, *, network: Optional[NetworkSpec] = None,
                     allow: Optional[Sequence[str]] = None,
                     deny: Optional[Sequence[str]] = None) -> "AsyncSandbox":
        """Resumes a task in a fresh sandbox replaying its log (as Client.resume)."""
        body = P.sandbox_body(tier, layers, lang, cpus, memory_mib, pids, qos, ttl_s,
                              network=P.network_body(network, allow, deny))
        return AsyncSandbox(self, await self._transport.send_json(P.resume_task(task_id, body)))

    async def task_log(self, task_id: str) -> JSONObject:
        return P.json_object(await self._transport.send_json(P.task_log(task_id)), "task log")

    async def delete_task(self, task_id: str) -> None:
        await self._transport.send(P.delete_task(task_id))


def _async_client(client: Optional[AsyncClient], socket: Optional[str], url: Optional[str],
                  token: Optional[str], timeout: Optional[float]) -> Tuple[AsyncClient, bool]:
    if client is not None:
        if socket is not None or url is not None or token is not None:
            raise ValueError("give client= or socket=/url=/token=, not both")
        return client, False
    return AsyncClient(socket_path=socket, url=url, token=token, timeout=timeout), True


class AsyncSandbox(P.SandboxFields):
    """One sandbox on asyncio: AsyncSandbox.create(...) / .connect(id), then
    sb.commands.run, sb.files, sb.kill(); `async with` kills it at the end.
    Made by create, connect or an AsyncClient, not by calling the class."""

    def __init__(self, client: AsyncClient, info: Any, owns_client: bool = False) -> None:
        self._client = client
        self._owns_client = owns_client
        self._closed = False
        self._update(info)
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)

    @classmethod
    async def create(cls: Type[_A], tier: Optional[str] = None,
                     layers: Optional[Sequence[str]] = None, *, timeout: Optional[float] = None,
                     qos: Optional[str] = None, lang: Optional[str] = None,
                     cpus: Optional[float] = None, memory_mib: Optional[int] = None,
                     pids: Optional[int] = None, task_id: Optional[str] = None,
                     user_namespace: Optional[bool] = None,
                     network: Optional[NetworkSpec] = None,
                     allow: Optional[Sequence[str]] = None,
                     deny: Optional[Sequence[str]] = None, socket: Optional[str] = None,
                     url: Optional[str] = None, token: Optional[str] = None,
                     client: Optional[AsyncClient] = None,
                     request_timeout: Optional[float] = 60.0,
                     snapshot: Optional[str] = None) -> _A:
        """As Sandbox.create: timeout is the sandbox's lifetime (ttl_s);
        network= or allow=/deny= give it a network with an egress policy;
        snapshot= makes it from a snapshot (only timeout= and task_id= beside)."""
        body = P.create_body(tier, snapshot, layers, lang, cpus, memory_mib, pids, qos,
                             P.whole_seconds(timeout, "timeout"), user_namespace, task_id,
                             P.network_body(network, allow, deny))
        client_, owns = _async_client(client, socket, url, token, request_timeout)
        try:
            info = await client_._transport.send_json(P.create_sandbox(body))
            return cls(client_, info, owns)
        except BaseException:
            if owns:
                await client_.close()
            raise

    @classmethod
    async def connect(cls: Type[_A], sandbox_id: str, *, socket: Optional[str] = None,
                      url: Optional[str] = None, token: Optional[str] = None,
                      client: Optional[AsyncClient] = None,
                      request_timeout: Optional[float] = 60.0) -> _A:
        """As Sandbox.connect: NotFound if the daemon has no such sandbox."""
        client_, owns = _async_client(client, socket, url, token, request_timeout)
        try:
            info = await client_._transport.send_json(P.get_sandbox(sandbox_id))
            return cls(client_, info, owns)
        except BaseException:
            if owns:
                await client_.close()
            raise

    @property
    def _t(self) -> AsyncTransport:
        return self._client._transport

    @property
    def sandbox_id(self) -> str:
        return self.id

    @property
    def client(self) -> AsyncClient:
        return self._client

    def __repr__(self) -> str:
        return "AsyncSandbox(id=%r, tier=%r, state=%r)" % (self.id, self.tier, self.state)

    async def exec(self, argv_or_code: Command, stdin: Optional[Stdin] = None,
                   env: Optional[Mapping[str, Any]] = None, cwd: Optional[str] = None,
                   timeout_s: Optional[int] = None, idempotent: bool = False,
                   args: Optional[Sequence[Any]] = None) -> ExecResult:
        """As Sandbox.exec (argv list or code string; ExecResult with bytes)."""
        return await self.exec_body(P.exec_body(self.tier, argv_or_code, args, stdin, env, cwd,
                                                timeout_s, idempotent))

    async def exec_body(self, body: JSONObject) -> ExecResult:
        return ExecResult.from_json(await self._t.send_json(P.exec_command(self.id, body)))

    async def exec_stream(self, argv_or_code: Command, stdin: Optional[Stdin] = None,
                          env: Optional[Mapping[str, Any]] = None, cwd: Optional[str] = None,
                          timeout_s: Optional[int] = None, idempotent: bool = False,
                          args: Optional[Sequence[Any]] = None) -> AsyncExecStream:
        """Starts the command; returns an AsyncExecStream of its output."""
        return await self.exec_stream_body(P.exec_body(self.tier, argv_or_code, args, stdin,
                                                       env, cwd, timeout_s, idempotent))

    async def exec_stream_body(self, body: JSONObject) -> AsyncExecStream:
        call = P.exec_command(self.id, body, stream=True)
        return AsyncExecStream(await self._t.open_stream(call), call)

    async def pack_diff(self, name: Optional[str] = None, version: str = "1") -> JSONObject:
        """As Sandbox.pack_diff."""
        if name is None:
            name = "diff-%s-%s" % (self.id, secrets.token_hex(3))
        return P.json_object(await self._t.send_json(P.pack_diff(self.id, name, version)),
                             "pack_diff")

    async def fork(self: _A, count: int = 1, *, timeout: Optional[float] = None,
                   task_ids: Optional[Sequence[str]] = None) -> Forked[_A]:
        """As Sandbox.fork: count new sandboxes from this one (its machine
        where the tier can, else its files), sharing its client."""
        obj = await self._t.send_json(P.fork(self.id, count, P.whole_seconds(timeout, "timeout"),
                                             task_ids))
        children = P.parse_fork(obj)
        return Forked([type(self)(self._client, info, False) for info in children],
                      {"forked": children.forked, "processes": children.processes,
                       "layer": children.layer, "pause_ms": children.pause_ms})

    async def snapshot(self) -> str:
        """As Sandbox.snapshot: keeps this sandbox (its machine where the tier
        can, else its files) as a snapshot; returns its id, for
        AsyncSandbox.create(snapshot=id)."""
        obj = P.json_object(await self._t.send_json(P.snapshot(self.id)), "snapshot")
        return str(obj["id"])

    async def pause(self: _A) -> _A:
        self._update(await self._t.send_json(P.pause(self.id)))
        return self

    async def resume(self: _A) -> _A:
        self._update(await self._t.send_json(P.resume(self.id)))
        return self

    async def refresh(self: _A) -> _A:
        self._update(await self._t.send_json(P.get_sandbox(self.id)))
        return self

    async def set_network(self: _A, allow: Optional[Sequence[str]] = None,
                          deny: Optional[Sequence[str]] = None, *,
                          network: Optional[NetworkSpec] = None) -> _A:
        """As Sandbox.set_network: replaces the whole egress policy (PATCH
        .../network) and refreshes sb.network."""
        body = P.network_patch(network, allow, deny)
        self._update(await self._t.send_json(P.set_network(self.id, body)))
        return self

    async def is_running(self) -> bool:
        try:
            return (await self.refresh()).state == "running"
        except errors.NotFound:
            return False

    async def kill(self) -> bool:
        """Deletes the sandbox: True if this call did, False if it was gone.
        Closes an AsyncClient that create/connect made for it."""
        if self._closed:
            return False
        self._closed = True
        try:
            await self._t.send(P.delete_sandbox(self.id))
            self.state = "deleted"
            return True
        except errors.NotFound:
            return False
        finally:
            if self._owns_client:
                await self._client.close()

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> Literal[False]:
        try:
            await self.kill()
        except errors.DsecError:
            if exc_type is None:
                raise
        return False

# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 to the daemon on asyncio streams (unix socket or TCP).

The asyncio twin of _transport.Transport: the same Calls (_protocol), the
same error mapping, the same retry rule (a request is sent a second time
only when a reused keep-alive connection turns out to be closed before any
byte of the answer came back, and a unix connect refused with EAGAIN is
tried again until the timeout). Idle connections are kept for reuse (at
most max_idle) on the event loop that made them; a connection is never
shared by two requests at once. The timeout bounds a whole request (each
line of a stream); an exec's own timeout is added, as in the blocking client.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, List, Optional, Tuple

from . import errors
from ._http import MAX_HEAD_BYTES, MAX_LINE_BYTES, ResponseHead, encode_request, parse_chunk_size
from ._http import parse_head
from ._protocol import Call, Endpoint, Response, decode_json, raise_for_status

_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_WIRE_ERRORS = (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, EOFError)
_READ_SIZE = 64 * 1024


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.reader = reader
        self.writer = writer
        self.loop = loop

    def usable(self, loop: asyncio.AbstractEventLoop) -> bool:
        return self.loop is loop and not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        try:
            self.writer.close()
        except RuntimeError:
            pass  # its event loop has ended: the socket went with it


async def _read_head(reader: asyncio.StreamReader) -> ResponseHead:
    while True:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial:  # closed before answering: a stale keep-alive connection
                raise ConnectionResetError("the daemon closed the connection without answering")
            raise errors.ProtocolError("connection closed inside the response head") from None
        except asyncio.LimitOverrunError:
            raise errors.ProtocolError("response head over %d bytes" % MAX_HEAD_BYTES) from None
        head = parse_head(raw)
        if 100 <= head.status < 200:
            continue  # an interim answer (100 Continue): the real one follows
        return head


class Body:
    """One response body, read as it arrives: Content-Length, chunked or to EOF."""

    def __init__(self, reader: asyncio.StreamReader, head: ResponseHead) -> None:
        self._reader = reader
        self._chunked = head.chunked
        self._left = head.content_length if head.has_body else 0
        self._to_eof = head.has_body and not self._chunked and self._left is None
        self._chunk_left = 0
        self._buf = b""
        self.done = not head.has_body or self._left == 0

    @property
    def framed(self) -> bool:
        """False when the body ends only with the connection (it cannot be reused)."""
        return not self._to_eof

    async def read_some(self) -> bytes:
        """The next bytes of the body; b"" once it has ended."""
        if self.done:
            return b""
        if self._chunked:
            return await self._read_chunked()
        if self._to_eof:
            data = await self._reader.read(_READ_SIZE)
            if not data:
                self.done = True
            return data
        assert self._left is not None
        data = await self._reader.read(min(self._left, _READ_SIZE))
        if not data:
            raise errors.ProtocolError("connection closed %d bytes before the body's end"
                                       % self._left)
        self._left -= len(data)
        self.done = self._left == 0
        return data

    async def _crlf_line(self) -> bytes:
        try:
            return await self._reader.readuntil(b"\r\n")
        except asyncio.LimitOverrunError:
            raise errors.ProtocolError("chunk-size or trailer line over %d bytes"
                                       % MAX_HEAD_BYTES) from None

    async def _read_chunked(self) -> bytes:
        if self._chunk_left == 0:
            size = parse_chunk_size(await self._crlf_line())
            if size == 0:
                while await self._crlf_line() != b"\r\n":
                    pass  # trailer fields: none of them matter here
                self.done = True
                return b""
            self._chunk_left = size
        data = await self._reader.read(min(self._chunk_left, _READ_SIZE))
        if not data:
            raise errors.ProtocolError("connection closed inside a chunk")
        self._chunk_left -= len(data)
        if self._chunk_left == 0 and await self._reader.readexactly(2) != b"\r\n":
            raise errors.ProtocolError("chunk not followed by CRLF")
        return data

    async def read_all(self) -> bytes:
        parts = [self._buf]
        self._buf = b""
        while True:
            data = await self.read_some()
            if not data:
                return b"".join(parts)
            parts.append(data)

    async def readline(self) -> bytes:
        """The next line with its b"\\n" (the last one may lack it); b"" at the end."""
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line, self._buf = self._buf[:i + 1], self._buf[i + 1:]
                return line
            if len(self._buf) > MAX_LINE_BYTES:
                raise errors.ProtocolError("stream line over %d bytes" % MAX_LINE_BYTES)
            data = await self.read_some()
            if not data:
                line, self._buf = self._buf, b""
                return line
            self._buf += data


class StreamResponse:
    """A 200 answer whose body is read line by line (the exec stream)."""

    def __init__(self, transport: "AsyncTransport", conn: _Conn, head: ResponseHead,
                 call: Call, timeout: Optional[float]) -> None:
        self._transport = transport
        self._conn: Optional[_Conn] = conn
        self._head = head
        self._body = Body(conn.reader, head)
        self._call = call
        self._timeout = timeout

    async def readline(self) -> bytes:
        if self._conn is None:
            return b""
        try:
            return await asyncio.wait_for(self._body.readline(), self._timeout)
        except _WIRE_ERRORS as e:
            self.abandon()
            raise self._transport.fail(self._call, e) from e
        except BaseException:
            self.abandon()
            raise

    async def finish(self) -> None:
        """Reads what is left (the terminating chunk); keeps the connection if clean."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            rest = await asyncio.wait_for(self._body.read_all(), self._timeout)
        except BaseException:
            conn.close()
            raise
        if rest or not self._head.keep_alive:
            conn.close()
        else:
            self._transport.release(conn)

    def abandon(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class AsyncTransport:
    """Sends Calls; keeps idle keep-alive connections for reuse."""

    def __init__(self, socket_path: Optional[str] = None, url: Optional[str] = None,
                 token: Optional[str] = None, timeout: Optional[float] = 60.0,
                 max_idle: int = 8) -> None:
        self._ep = Endpoint.resolve(socket_path, url)
        self.endpoint = self._ep.name
        self.token = token
        self.timeout = timeout
        self._max_idle = max_idle
        self._idle: List[_Conn] = []
        self.connections_made = 0  # for tests and diagnostics

    def fail(self, call: Call, exc: BaseException) -> errors.TransportError:
        return errors.transport_error(self.endpoint, call.method, call.target, exc)

    # -- connections ------------------------------------------------------

    async def _unix_socket(self, path: str) -> socket.socket:
        # As in _transport.UnixHTTPConnection.connect: EAGAIN means the
        # daemon's listen backlog is full and nothing was sent; back off
        # (1 ms doubling to 50 ms) until the request's timeout cancels us.
        # A unix connect never returns EINPROGRESS, so this is the only wait.
        delay = 0.001
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(path)
                return sock
            except BlockingIOError:
                sock.close()
            except BaseException:
                sock.close()
                raise
            await asyncio.sleep(delay)  # backoff: the kernel offers nothing to wait on
            delay = min(delay * 2, 0.05)

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        if self._ep.socket_path is not None:
            sock = await self._unix_socket(self._ep.socket_path)
            try:
                reader, writer = await asyncio.open_unix_connection(sock=sock,
                                                                    limit=MAX_HEAD_BYTES)
            except BaseException:
                sock.close()
                raise
        else:
            assert self._ep.host is not None
            reader, writer = await asyncio.open_connection(self._ep.host, self._ep.port,
                                                           limit=MAX_HEAD_BYTES)
        self.connections_made += 1
        return _Conn(reader, writer, loop)

    def _take_idle(self) -> Optional[_Conn]:
        loop = asyncio.get_running_loop()
        while self._idle:
            conn = self._idle.pop()
            if conn.usable(loop):
                return conn
            conn.close()  # closed by the daemon, or made on another (ended) event loop
        return None

    def release(self, conn: _Conn) -> None:
        if len(self._idle) < self._max_idle and conn.usable(asyncio.get_running_loop()):
            self._idle.append(conn)
        else:
            conn.close()

    async def close(self) -> None:
        """Closes the idle connections (streams still open keep theirs until they end)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            try:
                await conn.writer.wait_closed()
            except (OSError, RuntimeError):
                pass  # already broken, or made on an event loop that has ended

    # -- requests ---------------------------------------------------------

    async def _exchange(self, call: Call) -> Tuple[_Conn, ResponseHead]:
        """Sends call and reads the answer's head (retrying once on a stale idle connection)."""
        data = encode_request(call.method, call.target, self._ep.host_header,
                              call.headers(self.token), call.body)
        for attempt in (0, 1):
            conn = self._take_idle() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            try:
                conn.writer.write(data)
                await conn.writer.drain()
                return conn, await _read_head(conn.reader)
            except BaseException as e:
                conn.close()
                if reused and attempt == 0 and isinstance(e, _STALE):
                    continue
                raise
        raise AssertionError("unreachable")

    async def _send(self, call: Call) -> Response:
        conn, head = await self._exchange(call)
        body = Body(conn.reader, head)
        try:
            data = await body.read_all()
        except BaseException:
            conn.close()
            raise
        if head.keep_alive and body.framed:
            self.release(conn)
        else:
            conn.close()
        raise_for_status(head.status, head.reason, data)
        return Response(head.status, head.reason, head.headers, data)

    async def send(self, call: Call) -> Response:
        """Sends call, reads the whole answer; raises DsecError on 4xx/5xx."""
        try:
            return await asyncio.wait_for(self._send(call), call.timeout(self.timeout))
        except _WIRE_ERRORS as e:
            raise self.fail(call, e) from e

    async def send_json(self, call: Call) -> Any:
        return decode_json(call, await self.send(call))

    async def open_stream(self, call: Call) -> StreamResponse:
        """Sends call and returns the answer to read line by line; an error
        answer (read whole, the connection kept) raises."""
        timeout = call.timeout(self.timeout)
        try:
            conn, head = await asyncio.wait_for(self._exchange(call), timeout)
        except _WIRE_ERRORS as e:
            raise self.fail(call, e) from e
        if head.status < 400:
            return StreamResponse(self, conn, head, call, timeout)
        body = Body(conn.reader, head)
        try:
            data = await asyncio.wait_for(body.read_all(), timeout)
        except _WIRE_ERRORS:
            conn.close()
            data = b""
        except BaseException:
            conn.close()
            raise
        else:
            if head.keep_alive and body.framed:
                self.release(conn)
            else:
                conn.close()
        raise errors.error_from_response(head.status, data, head.reason)

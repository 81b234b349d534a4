# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the asyncio client (AsyncSandbox, AsyncClient and the
hand-written HTTP/1.1 under them) against the fake daemon, whose server is
http.server: a different HTTP implementation from the one under test.

No pytest plugin: each test runs its coroutine with asyncio.run().
"""

import asyncio
import base64
import functools
import gc
import json
import threading

import pytest

from fake_daemon import FakeDaemon, exec_obj, sandbox_obj

import libdsec
from libdsec import _http

NDJSON = "application/x-ndjson"


def b64(data):
    return base64.b64encode(data).decode("ascii")


def line(obj):
    return json.dumps(obj).encode("utf-8") + b"\n"


def out(stream, data):
    return line({"stream": stream, "data_b64": b64(data)})


def run(coro_fn):
    """Runs the decorated test coroutine on a fresh event loop."""
    @functools.wraps(coro_fn)
    def wrapper(*args, **kw):
        return asyncio.run(coro_fn(*args, **kw))
    return wrapper


@pytest.fixture
def fake():
    f = FakeDaemon()
    yield f
    f.close()


@pytest.fixture
def tcp_fake():
    f = FakeDaemon(tcp=True)
    yield f
    f.close()


async def created(fake, **kw):
    fake.reply(201, sandbox_obj("sb-a", tier=kw.get("tier", "container")))
    return await libdsec.AsyncSandbox.create(socket=fake.socket_path, **kw)


# -- AsyncSandbox ----------------------------------------------------------------


@run
async def test_create_run_kill(fake):
    sb = await created(fake, layers=["base:bookworm"], timeout=9.5, memory_mib=64)
    assert fake.last().json == {"tier": "container", "layers": ["base:bookworm"], "ttl_s": 10,
                                "memory_mib": 64}
    assert (sb.sandbox_id, sb.tier, sb.state) == ("sb-a", "container", "running")
    fake.reply(200, exec_obj(exit_code=4, stdout_b64=b64(b"o\xff"), stderr_b64=b64(b"e")))
    r = await sb.commands.run("echo o", cwd="/w", envs={"K": "v"}, stdin="in", timeout=3)
    assert fake.last().json == {"argv": ["/bin/sh", "-c", "echo o"], "cwd": "/w",
                                "env": {"K": "v"}, "stdin": "in", "timeout_s": 3}
    assert (r.exit_code, r.stdout, r.stdout_bytes, r.stderr, r.error) == (
        4, "o\ufffd", b"o\xff", "e", None)
    fake.reply(204)
    assert await sb.kill() is True
    assert (fake.last().method, fake.last().path) == ("DELETE", "/v1/sandboxes/sb-a")
    assert await sb.kill() is False
    assert len(fake.requests) == 3
    assert {r.connection for r in fake.requests} == {1}  # one keep-alive connection


@run
async def test_async_with_kills_and_keeps_the_body_exception(fake):
    fake.reply(201, sandbox_obj("sb-w"))
    fake.reply(204)
    async with await libdsec.AsyncSandbox.create(socket=fake.socket_path) as sb:
        assert sb.sandbox_id == "sb-w"
    assert fake.last().method == "DELETE"
    fake.reply(201, sandbox_obj("sb-x"))
    fake.error(500, "INTERNAL", "delete failed")
    with pytest.raises(KeyError):
        async with await libdsec.AsyncSandbox.create(socket=fake.socket_path):
            raise KeyError("from the body")


@run
async def test_connect_and_not_found(fake):
    fake.reply(200, sandbox_obj("sb-c", state="paused"))
    sb = await libdsec.AsyncSandbox.connect("sb-c", socket=fake.socket_path)
    assert (fake.last().method, fake.last().path) == ("GET", "/v1/sandboxes/sb-c")
    assert sb.state == "paused"
    fake.reply(200, sandbox_obj("sb-c", state="paused"))
    assert await sb.is_running() is False
    fake.reply(200, sandbox_obj("sb-c", state="running"))
    assert (await sb.resume()).state == "running"
    assert fake.last().path == "/v1/sandboxes/sb-c/resume"
    fake.reply(200, sandbox_obj("sb-c", state="paused"))
    assert (await sb.pause()).state == "paused"
    fake.error(404, "NOT_FOUND", "gone")
    assert await sb.kill() is False
    fake.error(404, "NOT_FOUND", "no sandbox sb-z")
    with pytest.raises(libdsec.NotFound):
        await libdsec.AsyncSandbox.connect("sb-z", socket=fake.socket_path)


@run
async def test_streamed_run_with_sync_and_async_callbacks(fake):
    sb = await created(fake)
    e_acute = "é".encode()
    fake.reply(200, content_type=NDJSON, chunks=[
        out("stdout", b"a" + e_acute[:1]), out("stderr", b"w"),
        out("stdout", e_acute[1:]) + b'{"exit": {"exit_code": 0}, "deferred_bytes": 0}', b"\n"])
    got = []

    async def on_err(text):
        await asyncio.sleep(0)  # a coroutine callback is awaited
        got.append(("err", text))

    r = await sb.commands.run("x", on_stdout=lambda t: got.append(("out", t)), on_stderr=on_err)
    assert fake.last().path == "/v1/sandboxes/sb-a/exec/stream"
    assert got == [("out", "a"), ("err", "w"), ("out", "é")]
    assert (r.exit_code, r.stdout, r.stderr) == (0, "aé", "w")
    fake.reply(204)
    await sb.kill()
    assert {r.connection for r in fake.requests} == {1}  # the stream's connection was reused


@run
async def test_callbacks_run_while_the_command_runs(fake):
    sb = await created(fake)
    gate = threading.Event()  # the fake sends the exit line only once it is set
    fake.reply(200, content_type=NDJSON, chunks=[out("stdout", b"first"), gate,
                                                 line({"exit": {"exit_code": 0}})])
    seen = []

    def on_stdout(text):
        seen.append((text, gate.is_set()))
        gate.set()

    await sb.commands.run("x", on_stdout=on_stdout)
    assert seen == [("first", False)] and fake.gate_timeouts == 0
    fake.reply(204)
    await sb.kill()


@run
async def test_exec_stream_errors_and_abandon(fake):
    sb = await created(fake)
    fake.error(429, "RESOURCE_EXHAUSTED", "too many concurrent execs")
    with pytest.raises(libdsec.ResourceExhausted):
        await sb.exec_stream(["true"])
    fake.reply(200, content_type=NDJSON, chunks=[
        line({"error": {"code": "INTERNAL", "message": "sandbox died"}})])
    with pytest.raises(libdsec.InternalError, match="sandbox died"):
        await (await sb.exec_stream(["true"])).wait()
    fake.reply(200, content_type=NDJSON, chunks=[out("stdout", b"")])
    stream = await sb.exec_stream(["true"])
    assert await stream.__anext__() == ("stdout", b"")
    with pytest.raises(libdsec.ProtocolError, match="exit"):
        await stream.__anext__()
    gate = threading.Event()
    fake.reply(200, content_type=NDJSON, chunks=[out("stdout", b"x"), gate,
                                                 line({"exit": {"exit_code": 0}})])
    async with await sb.exec_stream(["yes"]) as stream:
        assert await stream.__anext__() == ("stdout", b"x")
    gate.set()
    fake.reply(200, {"status": "ok"})
    await sb.client.health()
    before = fake.requests[-2].connection
    assert fake.last().connection != before  # the abandoned stream's connection was dropped
    fake.reply(204)
    await sb.kill()


@run
async def test_exec_and_exec_stream_return_bytes_results(fake):
    sb = await created(fake, tier="fncall")
    fake.reply(200, exec_obj(stdout_b64=b64(b"1\n"), seq=3))
    r = await sb.exec("import sys; print(sys.argv[1])", args=[1], stdin=b"\x00")
    assert fake.last().json == {"code": "import sys; print(sys.argv[1])", "argv": ["1"],
                                "stdin_b64": "AA=="}
    assert (r.stdout, r.seq) == (b"1\n", 3)
    fake.reply(200, content_type=NDJSON, chunks=[
        out("stdout", b"a"), out("stderr", b"b"), line({"exit": {"exit_code": 0}, "deferred_bytes": 2})])
    stream = await sb.exec_stream("print(1)", timeout_s=5)
    chunks = [c async for c in stream]
    assert chunks == [("stdout", b"a"), ("stderr", b"b")]
    assert (stream.result.stdout, stream.result.stderr, stream.deferred_bytes) == (b"a", b"b", 2)
    fake.reply(201, {"layer": "env:2", "digest": "sha256:00", "size_bytes": 1})
    assert (await sb.pack_diff("env", "2"))["layer"] == "env:2"
    with pytest.raises(libdsec.InvalidArgument):
        await sb.exec(["x"], args=["a"])
    fake.reply(204)
    await sb.kill()


@run
async def test_files(fake):
    sb = await created(fake)
    fake.reply(200, body=b"h\xc3\xa9 \xff", content_type="application/octet-stream")
    assert await sb.files.read("/work/a b") == "hé \ufffd"
    assert fake.last().query == {"path": ["/work/a b"]}
    fake.reply(200, body=b"\x00\xff", content_type="application/octet-stream")
    assert await sb.files.read("/work/x", format="bytes") == b"\x00\xff"
    with pytest.raises(ValueError):
        await sb.files.read("/work/x", format="stream")
    fake.reply(204)
    await sb.files.write("/work/x", "héllo", mode=0o600)
    req = fake.last()
    assert (req.method, req.body, req.query["mode"]) == ("PUT", "héllo".encode(), ["0600"])
    with pytest.raises(libdsec.InvalidArgument):
        await sb.files.write("/x", b"", mode=0o17777)
    fake.reply(200, {"entries": [{"name": "a", "type": "file", "size": 1, "mode": 0o644}]})
    assert [(e.name, e.path) for e in await sb.files.list("/work")] == [("a", "/work/a")]
    fake.error(404, "NOT_FOUND", "no such file", field="path")
    with pytest.raises(libdsec.NotFound) as e:
        await sb.files.read("/nope")
    assert e.value.field == "path"
    fake.reply(204)
    await sb.kill()


# -- AsyncClient and the shared mapping --------------------------------------------


ERROR_CASES = [
    (400, "INVALID_ARGUMENT", libdsec.InvalidArgument), (401, "UNAUTHENTICATED", libdsec.Unauthenticated),
    (404, "NOT_FOUND", libdsec.NotFound), (409, "FAILED_PRECONDITION", libdsec.Conflict),
    (409, "ALREADY_EXISTS", libdsec.Conflict), (413, "RESOURCE_EXHAUSTED", libdsec.ResourceExhausted),
    (429, "RESOURCE_EXHAUSTED", libdsec.ResourceExhausted), (503, "UNAVAILABLE", libdsec.Unavailable),
    (500, "INTERNAL", libdsec.InternalError), (504, "DEADLINE_EXCEEDED", libdsec.DeadlineExceeded),
]


@run
async def test_errors_map_as_in_the_blocking_client(fake):
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        for status, code, cls in ERROR_CASES:
            fake.error(status, code, message="bad " + code, field="memory_mib")
            with pytest.raises(cls) as e:
                await client.create(memory_mib=-1)
            assert (e.value.code, e.value.message, e.value.field, e.value.status) == (
                code, "bad " + code, "memory_mib", status)
        fake.reply(502, body=b"plain words", content_type="text/plain")
        with pytest.raises(libdsec.InternalError) as e:
            await client.health()
        assert (e.value.code, e.value.message) == (None, "plain words")
        fake.reply(200, body=b"<html>", content_type="text/html")
        with pytest.raises(libdsec.ProtocolError):
            await client.health()


def test_requests_are_the_same_bytes_of_json_as_the_blocking_clients(fake):
    """Both clients build requests with _protocol: same method, target, body, headers."""
    def script():
        fake.reply(201, sandbox_obj("sb-p", tier="fncall"))
        fake.reply(200, exec_obj())
        fake.reply(204)
        fake.reply(200, {"records": [], "checkpoints": []})

    script()
    c = libdsec.Client(socket_path=fake.socket_path)
    h = c.create(tier="fncall", layers=["a:1"], cpus=0.5, task_id="t.1", user_namespace=False)
    h.exec("print(1)", env={"A": 1}, timeout_s=5, idempotent=True)
    h.write_file("/a b/é", b"x", mode=0o700)
    c.task_log("t.1")
    c.close()

    async def go():
        async with libdsec.AsyncClient(socket_path=fake.socket_path) as ac:
            sb = await ac.create(tier="fncall", layers=["a:1"], cpus=0.5, task_id="t.1",
                                 user_namespace=False)
            await sb.exec("print(1)", env={"A": 1}, timeout_s=5, idempotent=True)
            await sb.files.write("/a b/é", b"x", mode=0o700)
            await ac.task_log("t.1")

    script()
    asyncio.run(go())
    sync, aio = fake.requests[:4], fake.requests[4:]
    keys = ("accept", "content-type", "content-length", "authorization")
    for s, a in zip(sync, aio):
        assert (s.method, s.raw_path, s.body) == (a.method, a.raw_path, a.body)
        assert {k: s.headers.get(k) for k in keys} == {k: a.headers.get(k) for k in keys}


@run
async def test_client_lists_gets_and_reads_metrics(fake):
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        fake.reply(200, {"sandboxes": [sandbox_obj("sb-1"), sandbox_obj("sb-2", tier="fncall")]})
        assert [(s.id, s.tier) for s in await client.list()] == [("sb-1", "container"),
                                                                 ("sb-2", "fncall")]
        fake.reply(200, sandbox_obj("a/b c"))
        await client.get("a/b c")
        assert fake.last().raw_path == "/v1/sandboxes/a%2Fb%20c"
        fake.reply(200, body=b"dsec_sandboxes 3\n", content_type="text/plain; version=0.0.4")
        assert await client.metrics() == "dsec_sandboxes 3\n"
        assert fake.last().headers["accept"] == "text/plain"
        fake.reply(200, {"layers": [{"name": "ws", "version": "1"}]})
        assert await client.layers() == [{"name": "ws", "version": "1"}]
        fake.reply(204)
        await client.remove_layer("ws:1")
        assert fake.last().raw_path == "/v1/layers/ws:1"
        fake.reply(201, sandbox_obj("sb-r", recorded=2))
        r = await client.resume("t-1", layers=["l:1"])
        assert (fake.last().path, r.recorded) == ("/v1/tasks/t-1/resume", 2)
        fake.reply(204)
        await client.delete_task("t-1")
        fake.reply(204)
        await client.delete("sb-1")
        assert (fake.last().method, fake.last().path) == ("DELETE", "/v1/sandboxes/sb-1")


@run
async def test_concurrent_requests_each_get_a_connection_and_are_reused(fake):
    n = 5
    gates = [threading.Event() for _ in range(n)]
    for g in gates:  # each answer is held until every request has arrived
        fake.reply(200, chunks=[b'{"status": "ok"}', g])
    async with libdsec.AsyncClient(socket_path=fake.socket_path, max_idle=8) as client:
        tasks = [asyncio.ensure_future(client.health()) for _ in range(n)]
        arrived = await asyncio.get_running_loop().run_in_executor(None, fake.wait_requests, n)
        assert arrived
        for g in gates:
            g.set()
        assert [h["status"] for h in await asyncio.gather(*tasks)] == ["ok"] * n
        assert fake.connections == n
        for _ in range(n):
            fake.reply(200, {"status": "ok"})
        await asyncio.gather(*[client.health() for _ in range(n)])
        assert fake.connections == n  # the idle ones were reused
        assert client._transport.connections_made == n


@run
async def test_a_connection_the_daemon_dropped_is_replaced_once(fake):
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        fake.reply(200, {"status": "ok"}, drop_after=True)
        fake.reply(200, {"status": "ok", "sandboxes": 2})
        await client.health()
        assert (await client.health())["sandboxes"] == 2
        assert [r.connection for r in fake.requests] == [1, 2]  # sent once each


@run
async def test_a_reused_connection_closed_without_an_answer_is_retried_once(fake):
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        fake.reply(200, {"status": "ok"})
        fake.reply(raw=b"", drop_after=True)  # as a daemon closing an idle connection
        fake.reply(200, {"status": "ok", "sandboxes": 3})
        await client.health()
        assert (await client.health())["sandboxes"] == 3
        assert [r.connection for r in fake.requests] == [1, 1, 2]


@run
async def test_a_fresh_connection_closed_without_an_answer_is_not_retried(fake):
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        fake.reply(raw=b"", drop_after=True)
        with pytest.raises(libdsec.TransportError, match="POST /v1/sandboxes/sb-1/exec"):
            await client._transport.send_json(
                libdsec._protocol.exec_command("sb-1", {"argv": ["true"]}))
        assert len(fake.requests) == 1


@run
async def test_timeout_is_a_transport_error(fake):
    gate = threading.Event()
    fake.reply(200, chunks=[b'{"status"', gate, b': "ok"}'])
    try:
        async with libdsec.AsyncClient(socket_path=fake.socket_path, timeout=0.3) as client:
            with pytest.raises(libdsec.TransportError, match="timed out"):
                await client.health()
    finally:
        gate.set()


@run
async def test_missing_socket_names_the_path(fake):
    path = fake.tmpdir + "/nothing-here.sock"
    async with libdsec.AsyncClient(socket_path=path) as client:
        with pytest.raises(ConnectionError) as e:
            await client.health()
    assert isinstance(e.value, libdsec.TransportError)
    assert path in str(e.value) and "is the daemon running" in str(e.value)


@run
async def test_tcp_with_token(tcp_fake):
    async with libdsec.AsyncClient(url=tcp_fake.url, token="s3cret") as client:
        tcp_fake.reply(200, {"status": "ok"})
        await client.health()
        req = tcp_fake.last()
        assert req.headers["authorization"] == "Bearer s3cret"
        assert req.headers["host"] == tcp_fake.url[len("http://"):]
        with pytest.raises(ValueError):
            libdsec.AsyncClient(url="https://h:1")
    async with libdsec.AsyncClient(url=tcp_fake.url, token="bad\r\nX-Injected: 1") as client:
        with pytest.raises(ValueError):
            await client.health()


def test_idle_connections_do_not_cross_event_loops(fake):
    client = libdsec.AsyncClient(socket_path=fake.socket_path)
    fake.reply(200, {"status": "ok"})
    asyncio.run(client.health())  # its loop ends with the client left open: a leak

    async def health_and_close():
        await client.health()
        await client.close()

    fake.reply(200, {"status": "ok"})
    with pytest.warns(ResourceWarning):  # the leaked connection, dropped unused
        asyncio.run(health_and_close())
        gc.collect()
    assert [r.connection for r in fake.requests] == [1, 2]


# -- HTTP/1.1 framing (the fake sends these bytes verbatim) ------------------------------


def raw_response(head, body=b""):
    return head.replace(b"\n", b"\r\n") + b"\r\n" + body


@run
async def test_chunk_extensions_trailers_and_interim_answers(fake):
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        fake.reply(raw=raw_response(b"HTTP/1.1 100 Continue\n")
                   + raw_response(b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n",
                                  b"4;ext=1\r\n{\"st\r\nC\r\natus\": \"ok\"}\r\n0\r\nX-T: 1\r\n\r\n"))
        assert await client.health() == {"status": "ok"}
        fake.reply(200, {"status": "again"})
        assert (await client.health())["status"] == "again"
        assert [r.connection for r in fake.requests] == [1, 1]


@run
async def test_a_body_that_ends_with_the_connection(fake):
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        fake.reply(raw=raw_response(b"HTTP/1.0 200 OK\nContent-Type: application/json\n",
                                    b'{"status": "ok"}'), drop_after=True)
        assert await client.health() == {"status": "ok"}
        fake.reply(200, {"status": "ok"}, headers={"Connection": "close"})
        await client.health()
        fake.reply(200, {"status": "ok"})
        await client.health()
        assert [r.connection for r in fake.requests] == [1, 2, 3]  # none of them reusable


@run
async def test_broken_answers_are_protocol_or_transport_errors(fake):
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        fake.reply(raw=b"SPDY/3 200 OK\r\n\r\n", drop_after=True)
        with pytest.raises(libdsec.ProtocolError, match="status line"):
            await client.health()
        fake.reply(raw=raw_response(b"HTTP/1.1 200 OK\nContent-Length: 10\n", b"{}"),
                   drop_after=True)
        with pytest.raises(libdsec.ProtocolError, match="8 bytes before the body's end"):
            await client.health()
        fake.reply(raw=raw_response(b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n",
                                    b"zz\r\n"), drop_after=True)
        with pytest.raises(libdsec.ProtocolError, match="chunk size"):
            await client.health()
        fake.reply(raw=raw_response(b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n",
                                    b"1;" + b"x" * (128 << 10) + b"\r\n"), drop_after=True)
        with pytest.raises(libdsec.ProtocolError, match="chunk-size or trailer line"):
            await client.health()


def test_framing_functions():
    req = _http.encode_request("POST", "/v1/x?a=b", "localhost",
                               {"Accept": "application/json"}, None)
    assert req == (b"POST /v1/x?a=b HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
                   b"Content-Length: 0\r\n\r\n")
    assert _http.encode_request("GET", "/", "h:1", {}, None) == b"GET / HTTP/1.1\r\nHost: h:1\r\n\r\n"
    with pytest.raises(ValueError):
        _http.encode_request("GET", "/\r\nX: y", "h", {}, None)
    head = _http.parse_head(b"HTTP/1.1 204 No Content\r\nSet-A: 1\r\nset-a: 2\r\n\r\n")
    assert (head.status, head.reason, head.headers, head.has_body) == (
        204, "No Content", {"set-a": "1, 2"}, False)
    assert _http.parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\n").content_length == 3
    with pytest.raises(libdsec.ProtocolError):
        _http.parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\n").content_length
    assert _http.parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                            b"Content-Length: 3\r\n\r\n").content_length is None
    assert not _http.parse_head(b"HTTP/1.0 200 OK\r\n\r\n").keep_alive
    assert _http.parse_head(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n").keep_alive
    with pytest.raises(libdsec.ProtocolError):
        _http.parse_head(b"HTTP/1.1 200 OK\r\n folded\r\n\r\n")
    assert _http.parse_chunk_size(b"1aF;name=value\r\n") == 0x1AF
    for bad in (b"\r\n", b"-1\r\n", b"0x10\r\n", b"g\r\n"):
        with pytest.raises(libdsec.ProtocolError):
            _http.parse_chunk_size(bad)

# SPDX-License-Identifier: Apache-2.0
"""End to end through the E2B-shaped API against the real daemon, blocking
and asyncio: Sandbox.create / connect, commands.run (with callbacks while
the command runs), files, pause/resume, kill; AsyncSandbox the same, over
the unix socket and over TCP with the token. Fixtures: conftest.py (`node`,
skips with the reason without $DSEC_VMMD, root, a static busybox or
mkfs.erofs)."""

import asyncio
import threading
import time

import pytest

import libdsec

ALL_BYTES = bytes(range(256))
# The first line is written, then the command sleeps: output that reaches a
# callback well before run() returns was streamed, not collected at the end.
LIVE = "echo first; sleep 2; echo second >&2"


def _create(node, **kw):
    kw.setdefault("layers", [node.base])
    return node.track(libdsec.Sandbox.create(socket=node.socket, **kw))


def _python_layer(node):
    if not node.python_layer:
        pytest.skip("no offline python layer: %s" % node.python_error)
    return [node.python_layer]


# -- blocking ----------------------------------------------------------------------


def test_create_run_files_connect_kill(node):
    sb = _create(node, timeout=300, memory_mib=128)
    try:
        assert sb.tier == "container" and sb.info["expires_unix_ms"] is not None  # timeout -> ttl_s
        r = sb.commands.run("echo out; echo err >&2; exit 3")
        assert (r.exit_code, r.stdout, r.stderr, r.error) == (3, "out\n", "err\n", None)
        r = sb.commands.run(["/bin/sh", "-c", "printf '\\377ok'"])
        assert (r.stdout, r.stdout_bytes, r.exit_code) == ("\ufffdok", b"\xffok", 0)
        r = sb.commands.run("echo $A; pwd; cat", envs={"A": "x"}, cwd="/tmp", stdin="in")
        assert r.stdout == "x\n/tmp\nin" and r.ok
        r = sb.commands.run("sleep 30", timeout=1)
        assert r.exit_code is None and r.error == "command timed out" and r.exec_result.timed_out

        sb.files.write("/work/d/é.txt", "héllo\n")
        assert sb.files.read("/work/d/é.txt") == "héllo\n"
        assert sb.files.read("/work/d/é.txt", format="bytes") == "héllo\n".encode()
        sb.files.write("/work/all.bin", ALL_BYTES)
        assert sb.files.read("/work/all.bin", format="bytes") == ALL_BYTES
        entries = {e.name: e for e in sb.files.list("/work/d")}
        assert entries["é.txt"].path == "/work/d/é.txt"
        assert (entries["é.txt"].type, entries["é.txt"].size) == ("file", 7)
        with pytest.raises(libdsec.NotFound):
            sb.files.read("/work/missing")

        other = libdsec.Sandbox.connect(sb.sandbox_id, socket=node.socket)
        assert (other.sandbox_id, other.tier) == (sb.sandbox_id, "container")
        assert other.commands.run("cat /work/d/é.txt").stdout == "héllo\n"
        assert other.pause().state == "paused"
        assert sb.is_running() is False
        with pytest.raises(libdsec.Conflict):
            sb.commands.run("true")
        other.resume()
        assert sb.is_running() is True
        assert other.kill() is True
        assert sb.kill() is False  # already gone
        with pytest.raises(libdsec.NotFound):
            libdsec.Sandbox.connect(sb.sandbox_id, socket=node.socket)
    finally:
        sb.kill()


def test_callbacks_get_output_while_the_command_runs(node):
    with _create(node) as sb:
        seen = []
        start = time.monotonic()
        r = sb.commands.run(LIVE, on_stdout=lambda t: seen.append(("out", t, time.monotonic())),
                            on_stderr=lambda t: seen.append(("err", t, time.monotonic())))
        end = time.monotonic()
        assert [(s, t) for s, t, _ in seen] == [("out", "first\n"), ("err", "second\n")]
        assert seen[0][2] - start < 1.5 and end - seen[0][2] >= 1.5
        assert (r.exit_code, r.stdout, r.stderr) == (0, "first\n", "second\n")


def test_with_block_kills_the_sandbox(node):
    with _create(node) as sb:
        sid = sb.sandbox_id
        assert sb.commands.run("echo hi").stdout == "hi\n"
    with pytest.raises(libdsec.NotFound):
        node.client.get(sid)


def test_fncall_runs_code(node):
    with _create(node, tier="fncall", layers=_python_layer(node)) as sb:
        got = []
        r = sb.commands.run("import sys; print(6 * 7); print('e', file=sys.stderr)",
                            on_stdout=got.append)
        assert (r.exit_code, r.stdout, r.stderr, "".join(got)) == (0, "42\n", "e\n", "42\n")


def test_fork_children_start_from_the_files_and_stay_independent(node):
    with _create(node) as sb:
        sb.files.write("/work/state", "prepared %s" % sb.sandbox_id)
        kids = [node.track(k) for k in sb.fork(2, timeout=300)]
        try:
            assert len({k.sandbox_id for k in kids} | {sb.sandbox_id}) == 3
            assert all(k.info["expires_unix_ms"] is not None for k in kids)
            for k in kids:
                assert k.files.read("/work/state") == "prepared %s" % sb.sandbox_id
            kids[0].files.write("/work/state", "changed")
            assert kids[1].files.read("/work/state") == "prepared %s" % sb.sandbox_id
            assert sb.files.read("/work/state") == "prepared %s" % sb.sandbox_id
            with pytest.raises(libdsec.InvalidArgument):
                sb.fork(0)
            task = node.new_task("fork")
            (child,) = sb.fork(1, task_ids=[task])
            kids.append(node.track(child))
            assert child.info["task_id"] == task
            assert child.files.read("/work/state") == "prepared %s" % sb.sandbox_id
        finally:
            for k in kids:
                k.kill()


def test_snapshot_makes_sandboxes_from_the_files_it_kept(node):
    with _create(node) as sb:
        sb.files.write("/work/state", "kept %s" % sb.sandbox_id)
        sid = sb.snapshot()
        try:
            assert sid.startswith("snap-")
            sb.files.write("/work/state", "changed later")
            client = libdsec.Client(socket_path=node.socket)
            assert sid in [s["id"] for s in client.snapshots()]
            with node.track(libdsec.Sandbox.create(snapshot=sid, timeout=300,
                                                   socket=node.socket)) as made:
                assert made.files.read("/work/state") == "kept %s" % sb.sandbox_id
                assert made.info["expires_unix_ms"] is not None
            # The snapshot decides the contents: layers= beside it is refused.
            with pytest.raises(TypeError):
                libdsec.Sandbox.create(snapshot=sid, layers=[node.base], socket=node.socket)
        finally:
            libdsec.Client(socket_path=node.socket).delete_snapshot(sid)
        with pytest.raises(libdsec.InvalidArgument):
            libdsec.Sandbox.create(snapshot=sid, socket=node.socket)


def _bounded(w, seconds=60):
    """Closes the watch after seconds: a missing event fails the test
    instead of blocking it (the stream's keepalives never end it)."""
    t = threading.Timer(seconds, w.close)
    t.daemon = True
    t.start()
    return t


def test_watch_dir_iterates_a_directorys_changes_until_its_end(node):
    with _create(node) as sb:
        sb.commands.run("mkdir -p /work/w")
        with pytest.raises(libdsec.NotFound):
            sb.files.watch_dir("/work/no/such")
        with pytest.raises(libdsec.InvalidArgument):
            sb.files.watch_dir("/work/w", recursive="yes")
        seen = []
        with sb.files.watch_dir("/work/w", recursive=True) as w:
            timer = _bounded(w)
            sb.files.write("/work/w/a.txt", "A")
            sb.commands.run("mkdir /work/w/sub && sleep 0.2 && echo x > /work/w/sub/b && rm /work/w/a.txt")
            for ev in w:
                assert isinstance(ev, libdsec.FileEvent)
                seen.append((ev.type, ev.name))
                if ("remove", "a.txt") in seen and ("create", "sub/b") in seen:
                    break
            timer.cancel()
        assert ("create", "a.txt") in seen and ("create", "sub") in seen, seen
        assert ("remove", "a.txt") in seen and ("create", "sub/b") in seen, seen
        # The directory's removal ends a watch with NotFound.
        w = sb.files.watch_dir("/work/w")
        timer = _bounded(w)
        sb.commands.run("rm -rf /work/w")
        with pytest.raises(libdsec.NotFound):
            for _ in w:
                pass
        timer.cancel()


# -- asyncio -------------------------------------------------------------------------


def test_async_create_run_files_connect_kill(node):
    async def go():
        sb = node.track(await libdsec.AsyncSandbox.create(layers=[node.base], timeout=300,
                                                          socket=node.socket))
        try:
            r = await sb.commands.run("echo out; echo err >&2; exit 3")
            assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
            # Concurrent commands: each request on its own connection.
            rs = await asyncio.gather(*[sb.commands.run("echo %d" % i) for i in range(4)])
            assert [x.stdout for x in rs] == ["%d\n" % i for i in range(4)]
            await sb.files.write("/work/a.txt", "héllo")
            assert await sb.files.read("/work/a.txt") == "héllo"
            await sb.files.write("/work/all.bin", ALL_BYTES)
            assert await sb.files.read("/work/all.bin", format="bytes") == ALL_BYTES
            assert {e.path for e in await sb.files.list("/work")} >= {"/work/a.txt",
                                                                      "/work/all.bin"}
            stream = await sb.exec_stream(["sh", "-c", "echo s; echo t >&2"])
            assert sorted([c async for c in stream]) == [("stderr", b"t\n"), ("stdout", b"s\n")]
            assert stream.result.exit_code == 0

            other = await libdsec.AsyncSandbox.connect(sb.sandbox_id, socket=node.socket)
            assert (await other.commands.run("cat /work/a.txt")).stdout == "héllo"
            assert (await other.pause()).state == "paused"
            assert await sb.is_running() is False
            with pytest.raises(libdsec.Conflict):
                await sb.commands.run("true")
            await other.resume()
            assert await other.kill() is True
            assert await sb.kill() is False
            with pytest.raises(libdsec.NotFound):
                await libdsec.AsyncSandbox.connect(sb.sandbox_id, socket=node.socket)
        finally:
            await sb.kill()

    asyncio.run(go())


def test_async_watch_dir(node):
    async def go():
        sb = node.track(await libdsec.AsyncSandbox.create(layers=[node.base], socket=node.socket))
        try:
            await sb.commands.run("mkdir -p /work/w")
            async def first(w, want):
                async for ev in w:
                    if (ev.type, ev.name) == want:
                        return ev

            async with await sb.files.watch_dir("/work/w") as w:
                await sb.files.write("/work/w/f", "x")
                assert await asyncio.wait_for(first(w, ("create", "f")), 60) is not None
            # Deleting the sandbox ends a watch with Unavailable.
            w = await sb.files.watch_dir("/work/w")
            other = await libdsec.AsyncSandbox.connect(sb.sandbox_id, socket=node.socket)
            assert await other.kill() is True
            with pytest.raises(libdsec.Unavailable):
                await asyncio.wait_for(first(w, ("never", "")), 60)
        finally:
            await sb.kill()

    asyncio.run(go())


def test_async_fork(node):
    async def go():
        sb = node.track(await libdsec.AsyncSandbox.create(layers=[node.base], socket=node.socket))
        try:
            await sb.files.write("/work/a", "from %s" % sb.sandbox_id)
            kids = await sb.fork(2)
            try:
                assert [await k.files.read("/work/a") for k in kids] == ["from %s" % sb.sandbox_id] * 2
            finally:
                for k in kids:
                    node.track(k)
                    await k.kill()
        finally:
            await sb.kill()

    asyncio.run(go())


def test_async_snapshot(node):
    async def go():
        sb = node.track(await libdsec.AsyncSandbox.create(layers=[node.base], socket=node.socket))
        try:
            await sb.files.write("/work/a", "from %s" % sb.sandbox_id)
            sid = await sb.snapshot()
            made = node.track(await libdsec.AsyncSandbox.create(snapshot=sid, socket=node.socket))
            try:
                assert await made.files.read("/work/a") == "from %s" % sb.sandbox_id
            finally:
                await made.kill()
                client = libdsec.AsyncClient(socket_path=node.socket)
                await client.delete_snapshot(sid)
                await client.close()
        finally:
            await sb.kill()

    asyncio.run(go())


def test_async_callbacks_get_output_while_the_command_runs(node):
    async def go():
        seen = []

        async def on_stdout(text):
            seen.append(("out", text, time.monotonic()))

        async with await libdsec.AsyncSandbox.create(layers=[node.base],
                                                     socket=node.socket) as sb:
            node.track(sb)
            start = time.monotonic()
            r = await sb.commands.run(LIVE, on_stdout=on_stdout,
                                      on_stderr=lambda t: seen.append(("err", t, time.monotonic())))
            end = time.monotonic()
            sid = sb.sandbox_id
        assert [(s, t) for s, t, _ in seen] == [("out", "first\n"), ("err", "second\n")]
        assert seen[0][2] - start < 1.5 and end - seen[0][2] >= 1.5
        assert (r.stdout, r.stderr) == ("first\n", "second\n")
        with pytest.raises(libdsec.NotFound):
            node.client.get(sid)  # async with killed it

    asyncio.run(go())


def test_async_over_tcp_with_token(node):
    d = node.daemon
    if not d.url:
        pytest.skip("the daemon offers no --listen/--token-file")

    async def go():
        with pytest.raises(libdsec.Unauthenticated):
            await libdsec.AsyncSandbox.create(layers=[node.base], url=d.url, token="wrong")
        async with libdsec.AsyncClient(url=d.url, token=d.token) as client:
            async with await libdsec.AsyncSandbox.create(layers=[node.base],
                                                         client=client) as sb:
                node.track(sb)
                got = []
                r = await sb.commands.run("echo tcp", on_stdout=got.append)
                assert (r.stdout, got) == ("tcp\n", ["tcp\n"])
                assert (await client.health())["status"] == "ok"

    asyncio.run(go())

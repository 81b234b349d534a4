# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the E2B-shaped blocking API against the fake daemon:
Sandbox.create / connect / kill, sb.commands.run (plain and streamed, with
callbacks), sb.files.read(format=) / write / list, is_running, pause/resume."""

import base64
import io
import json
import threading

import pytest

from fake_daemon import FakeDaemon, exec_obj, sandbox_obj

import libdsec


def b64(data):
    return base64.b64encode(data).decode("ascii")


def line(obj):
    return json.dumps(obj).encode("utf-8") + b"\n"


def out(stream, data):
    return line({"stream": stream, "data_b64": b64(data)})


@pytest.fixture
def fake():
    f = FakeDaemon()
    yield f
    f.close()


@pytest.fixture
def sb(fake):
    fake.reply(201, sandbox_obj("sb-i"))
    s = libdsec.Sandbox.create(socket=fake.socket_path)
    yield s
    fake.reply(204)
    s.kill()


# -- create / connect / kill ----------------------------------------------------


def test_create_sends_the_fields_given_and_timeout_as_ttl(fake):
    fake.reply(201, sandbox_obj("sb-c", qos="ls", expires_unix_ms=1700000031000))
    sb = libdsec.Sandbox.create(tier="container", layers=["base:bookworm"], timeout=30.2,
                                qos="ls", memory_mib=256, socket=fake.socket_path)
    assert isinstance(sb, libdsec.Sandbox)
    req = fake.last()
    assert (req.method, req.path) == ("POST", "/v1/sandboxes")
    assert req.json == {"tier": "container", "layers": ["base:bookworm"], "ttl_s": 31,
                        "qos": "ls", "memory_mib": 256}
    assert (sb.sandbox_id, sb.id, sb.tier) == ("sb-c", "sb-c", "container")
    assert sb.files.default_format == "text"
    fake.reply(204)
    assert sb.kill() is True
    assert (fake.last().method, fake.last().path) == ("DELETE", "/v1/sandboxes/sb-c")
    assert sb.kill() is False  # once: nothing sent the second time
    sb.close()
    assert len(fake.requests) == 2


def test_create_refuses_a_timeout_that_is_not_a_number(fake):
    with pytest.raises(TypeError):
        libdsec.Sandbox.create(timeout="30", socket=fake.socket_path)
    assert fake.requests == []


def test_create_error_is_the_sdks_error(fake):
    fake.error(503, "UNAVAILABLE", "tier microvm unavailable", field="tier")
    with pytest.raises(libdsec.Unavailable) as e:
        libdsec.Sandbox.create(tier="microvm", socket=fake.socket_path)
    assert e.value.field == "tier"


def test_connect_gets_the_sandbox_first(fake):
    fake.reply(200, sandbox_obj("sb-old", state="paused", tier="fncall"))
    sb = libdsec.Sandbox.connect("sb-old", socket=fake.socket_path)
    req = fake.last()
    assert (req.method, req.path) == ("GET", "/v1/sandboxes/sb-old")
    assert (sb.sandbox_id, sb.state, sb.tier) == ("sb-old", "paused", "fncall")
    assert sb.files.default_format == "text"
    fake.reply(404, {"error": {"code": "NOT_FOUND", "message": "gone"}})
    assert sb.kill() is False  # already gone (TTL): E2B's kill() says so


def test_connect_to_an_unknown_sandbox_raises_not_found(fake):
    fake.error(404, "NOT_FOUND", "no sandbox sb-nope")
    with pytest.raises(libdsec.NotFound):
        libdsec.Sandbox.connect("sb-nope", socket=fake.socket_path)
    assert len(fake.requests) == 1


def test_connect_with_a_shared_client_leaves_it_open(fake):
    client = libdsec.Client(socket_path=fake.socket_path)
    fake.reply(200, sandbox_obj("sb-s"))
    with libdsec.Sandbox.connect("sb-s", client=client) as sb:
        assert sb.client is client
        fake.reply(204)
    assert (fake.last().method, fake.last().path) == ("DELETE", "/v1/sandboxes/sb-s")
    fake.reply(200, {"status": "ok"})
    assert client.health()["status"] == "ok"
    client.close()


def test_with_block_kills_a_created_sandbox(fake):
    fake.reply(201, sandbox_obj("sb-w"))
    fake.reply(204)
    with libdsec.Sandbox.create(socket=fake.socket_path) as sb:
        assert sb.sandbox_id == "sb-w"
    assert [(r.method, r.path) for r in fake.requests] == [
        ("POST", "/v1/sandboxes"), ("DELETE", "/v1/sandboxes/sb-w")]


def test_is_running_pause_resume(fake, sb):
    fake.reply(200, sandbox_obj("sb-i", state="running"))
    assert sb.is_running() is True
    fake.reply(200, sandbox_obj("sb-i", state="paused"))
    assert sb.pause() is sb and sb.state == "paused"
    assert fake.last().path == "/v1/sandboxes/sb-i/pause"
    fake.reply(200, sandbox_obj("sb-i", state="paused"))
    assert sb.is_running() is False
    fake.reply(200, sandbox_obj("sb-i", state="running"))
    assert sb.resume().state == "running"
    fake.error(404, "NOT_FOUND", "gone")
    assert sb.is_running() is False


# -- commands.run -----------------------------------------------------------------


def test_run_a_shell_string_on_a_container(fake, sb):
    fake.reply(200, exec_obj(exit_code=2, stdout_b64=b64(b"out\n"), stderr_b64=b64(b"err\n")))
    r = sb.commands.run("echo out; echo err >&2; exit 2")
    req = fake.last()
    assert (req.method, req.path) == ("POST", "/v1/sandboxes/sb-i/exec")
    assert req.json == {"argv": ["/bin/sh", "-c", "echo out; echo err >&2; exit 2"]}
    assert isinstance(r, libdsec.CommandResult)
    assert (r.exit_code, r.stdout, r.stderr, r.error) == (2, "out\n", "err\n", None)
    assert (r.stdout_bytes, r.stderr_bytes) == (b"out\n", b"err\n")
    assert not r.ok
    with pytest.raises(libdsec.ExecFailed) as e:
        r.check()
    assert e.value.result is r.exec_result


def test_run_sends_every_option(fake, sb):
    fake.reply(200, exec_obj())
    r = sb.commands.run(["cat"], timeout=1.5, cwd="/tmp", envs={"A": "1"}, stdin=b"\x00in",
                        idempotent=True)
    assert fake.last().json == {"argv": ["cat"], "timeout_s": 2, "cwd": "/tmp",
                                "env": {"A": "1"}, "stdin_b64": b64(b"\x00in"),
                                "idempotent": True}
    assert r.ok and r.check() is r


def test_run_output_that_is_not_utf8_is_replaced_in_str_and_exact_in_bytes(fake, sb):
    fake.reply(200, exec_obj(stdout_b64=b64(b"\xffok\n")))
    r = sb.commands.run("printf '\\377ok\\n'")
    assert (r.stdout, r.stdout_bytes) == ("\ufffdok\n", b"\xffok\n")


def test_run_killed_command_has_no_exit_code_and_says_why(fake, sb):
    fake.reply(200, exec_obj(exit_code=None, signal=9, timed_out=True, killed_by="timeout"))
    r = sb.commands.run("sleep 100", timeout=1)
    assert r.exit_code is None and r.error == "command timed out"
    assert r.exec_result.killed_by == "timeout"


def test_run_on_fncall_sends_code(fake):
    fake.reply(201, sandbox_obj("sb-f", tier="fncall"))
    sb = libdsec.Sandbox.create(tier="fncall", socket=fake.socket_path)
    fake.reply(200, exec_obj(stdout_b64=b64(b"4\n")))
    assert sb.commands.run("print(2 + 2)").stdout == "4\n"
    assert fake.last().json == {"code": "print(2 + 2)"}
    fake.reply(204)
    sb.kill()


def test_run_with_callbacks_streams_text_and_keeps_characters_whole(fake, sb):
    e_acute = "é".encode()
    fake.reply(200, content_type="application/x-ndjson", chunks=[
        out("stdout", b"a" + e_acute[:1]),
        out("stderr", b"warn\n") + out("stdout", e_acute[1:] + b"\n"),
        line({"exit": {"exit_code": 0, "signal": None, "duration_ms": 5.0}}),
    ])
    got = []
    r = sb.commands.run("x", on_stdout=lambda t: got.append(("out", t)),
                        on_stderr=lambda t: got.append(("err", t)), timeout=5)
    req = fake.last()
    assert (req.path, req.json) == ("/v1/sandboxes/sb-i/exec/stream",
                                    {"argv": ["/bin/sh", "-c", "x"], "timeout_s": 5})
    assert got == [("out", "a"), ("err", "warn\n"), ("out", "é\n")]
    assert (r.exit_code, r.stdout, r.stderr) == (0, "aé\n", "warn\n")
    assert r.stdout_bytes == b"a" + e_acute + b"\n"


def test_run_with_one_callback_still_returns_both_streams(fake, sb):
    fake.reply(200, content_type="application/x-ndjson", chunks=[
        out("stdout", b"o"), out("stderr", b"e"), line({"exit": {"exit_code": 1}})])
    errs = []
    r = sb.commands.run("x", on_stderr=errs.append)
    assert errs == ["e"] and (r.stdout, r.stderr, r.exit_code) == ("o", "e", 1)


def test_a_truncated_character_at_the_end_reaches_the_callback(fake, sb):
    fake.reply(200, content_type="application/x-ndjson", chunks=[
        out("stdout", b"ok\xe2\x82"), line({"exit": {"exit_code": 0}})])
    got = []
    sb.commands.run("x", on_stdout=got.append)
    assert "".join(got) == "ok\ufffd"


def test_callbacks_run_while_the_command_runs(fake, sb):
    gate = threading.Event()  # the fake sends the exit line only once it is set
    fake.reply(200, content_type="application/x-ndjson", chunks=[
        out("stdout", b"first\n"), gate, line({"exit": {"exit_code": 0}})])
    seen = []

    def on_stdout(text):
        seen.append((text, gate.is_set()))
        gate.set()

    sb.commands.run("x", on_stdout=on_stdout)
    assert seen == [("first\n", False)]
    assert fake.gate_timeouts == 0  # the exit line waited for the callback, not for the clock


def test_a_callback_that_raises_stops_reading_and_drops_the_connection(fake, sb):
    gate = threading.Event()
    fake.reply(200, content_type="application/x-ndjson", chunks=[
        out("stdout", b"x"), gate, line({"exit": {"exit_code": 0}})])

    def boom(text):
        raise KeyError(text)

    with pytest.raises(KeyError):
        sb.commands.run("x", on_stdout=boom)
    gate.set()
    fake.reply(200, {"status": "ok"})
    sb.client.health()
    assert fake.last().connection == 2


def test_run_error_before_the_stream_is_the_sdks_error(fake, sb):
    fake.error(409, "FAILED_PRECONDITION", "sandbox is paused")
    with pytest.raises(libdsec.Conflict):
        sb.commands.run("true", on_stdout=print)
    fake.error(429, "RESOURCE_EXHAUSTED", "too many execs")
    with pytest.raises(libdsec.ResourceExhausted):
        sb.commands.run("true")


# -- files ---------------------------------------------------------------------------


def test_files_read_text_by_default_and_bytes_when_asked(fake, sb):
    fake.reply(200, body="héllo \xff".encode("latin-1") + "é".encode(),
               content_type="application/octet-stream")
    text = sb.files.read("/work/a b.txt")
    assert fake.last().query == {"path": ["/work/a b.txt"]}
    assert text == "h\ufffdllo \ufffd" + "é"
    fake.reply(200, body=b"\x00\xff", content_type="application/octet-stream")
    assert sb.files.read("/work/x", format="bytes") == b"\x00\xff"
    fake.reply(200, body=b"abc", content_type="application/octet-stream")
    assert sb.files.read("/work/x", format="text") == "abc"
    with pytest.raises(ValueError):
        sb.files.read("/work/x", format="stream")


def test_compat_sandbox_files_read_bytes_by_default(fake):
    fake.reply(201, sandbox_obj("sb-old"))
    old = libdsec.Sandbox(socket=fake.socket_path)
    assert old.files.default_format == "bytes"
    fake.reply(200, body=b"abc", content_type="application/octet-stream")
    assert old.files.read("/a") == b"abc"
    fake.reply(200, body=b"abc", content_type="application/octet-stream")
    assert old.files.read("/a", format="text") == "abc"
    fake.reply(204)
    old.close()


def test_files_write_str_bytes_and_file_objects(fake, sb):
    for data, sent in (("héllo", "héllo".encode()), (b"\x00\x01", b"\x00\x01"),
                       (bytearray(b"ba"), b"ba"), (io.BytesIO(b"from a file"), b"from a file"),
                       (io.StringIO("text file"), b"text file")):
        fake.reply(204)
        assert sb.files.write("/work/f", data) is None
        req = fake.last()
        assert (req.method, req.path, req.body, req.query["mode"]) == (
            "PUT", "/v1/sandboxes/sb-i/files", sent, ["0644"])
    with pytest.raises(TypeError):
        sb.files.write("/work/f", 12)


def test_files_list_fills_in_paths(fake, sb):
    fake.reply(200, {"entries": [{"name": "a", "type": "file", "size": 3, "mode": 0o644},
                                 {"name": "d", "type": "dir", "size": 0, "mode": 0o755}]})
    entries = sb.files.list("/work/")
    assert fake.last().query == {"path": ["/work/"]}
    assert [(e.name, e.path, e.type) for e in entries] == [("a", "/work/a", "file"),
                                                           ("d", "/work/d", "dir")]
    fake.reply(200, {"entries": [{"name": "etc", "type": "dir", "size": 0, "mode": 0o755}]})
    assert sb.files.list("/")[0].path == "/etc"


def test_old_names_are_still_there():
    for name in ("Sandbox", "Task", "Files", "Client", "SandboxHandle", "ExecResult",
                 "ExecStream", "Divergence", "FileEntry", "DsecError", "NotFound",
                 "TransportError", "DEFAULT_SOCKET", "UnixHTTPConnection"):
        assert hasattr(libdsec, name), name
    assert set(libdsec.__all__) <= set(dir(libdsec))


def test_a_str_command_is_a_shell_command_on_every_tier_with_a_shell():
    from libdsec import _protocol
    for tier in ("container", "microvm"):
        assert _protocol.command_body(tier, "echo $A")["argv"] == ["/bin/sh", "-c", "echo $A"]
    assert _protocol.command_body("microvm", ["echo", "x"])["argv"] == ["echo", "x"]
    fncall = _protocol.command_body("fncall", "print(1)")
    assert fncall.get("argv") != ["/bin/sh", "-c", "print(1)"]


# -- fork -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["machine", "files"])
def test_fork_returns_the_children_and_says_how_they_were_made(fake, sb, how):
    answer = {"source": "sb-i", "forked": how, "fork_seq": 0,
              "processes": "carried: ..." if how == "machine" else "not carried: the tier ...",
              "layer": None if how == "machine" else "fork-sb-i:1-0",
              "pause_ms": 12.5 if how == "machine" else None,
              "sandboxes": [sandbox_obj("sb-c1", tier="microvm"), sandbox_obj("sb-c2", tier="microvm")]}
    fake.reply(201, answer)
    children = sb.fork(2, timeout=60)
    assert fake.last().path == "/v1/sandboxes/sb-i/fork"
    assert fake.last().json == {"count": 2, "ttl_s": 60}
    assert [c.sandbox_id for c in children] == ["sb-c1", "sb-c2"]
    assert isinstance(children, list) and isinstance(children, libdsec.Forked)
    assert children.forked == how
    assert children.processes == answer["processes"]
    assert children.layer == answer["layer"]
    assert children.pause_ms == answer["pause_ms"]
    for c in children:
        fake.reply(204)
        c.kill()

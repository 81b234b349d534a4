# SPDX-License-Identifier: Apache-2.0
"""Unit tests of libdsec.Sandbox / Task / Files against the fake daemon."""

import os

import pytest

from fake_daemon import FakeDaemon, exec_obj, sandbox_obj

import libdsec


@pytest.fixture
def fake():
    f = FakeDaemon()
    yield f
    f.close()


def test_sandbox_creates_on_construction_and_deletes_at_block_end(fake):
    fake.reply(201, sandbox_obj("sb-7", qos="ls"))
    fake.reply(200, exec_obj(exit_code=3, stdout_b64="b3V0", stderr_b64="ZXJy", duration_ms=250.0))
    fake.reply(204)
    with libdsec.Sandbox(tier="container", layers=["base:bookworm"], qos="ls",
                         socket=fake.socket_path) as sb:
        assert (sb.id, sb.tier, sb.state) == ("sb-7", "container", "running")
        r = sb.exec(["sh", "-c", "x"])
        assert (r.stdout, r.stderr, r.exit_code, r.duration_s) == (b"out", b"err", 3, 0.25)
    create, ex, delete = fake.requests
    assert (create.method, create.path) == ("POST", "/v1/sandboxes")
    assert create.json == {"tier": "container", "layers": ["base:bookworm"], "qos": "ls"}
    assert ex.json == {"argv": ["sh", "-c", "x"]}
    assert (delete.method, delete.path) == ("DELETE", "/v1/sandboxes/sb-7")


def test_socket_comes_from_the_environment(fake, monkeypatch):
    monkeypatch.setenv("DSEC_SOCKET", fake.socket_path)
    fake.reply(201, sandbox_obj("sb-env", tier="fncall"))
    fake.reply(204)
    sb = libdsec.Sandbox(tier="fncall")
    assert sb.client.endpoint == "unix:" + fake.socket_path
    assert fake.last().json == {"tier": "fncall"}
    sb.close()
    sb.close()  # once only
    assert [r.method for r in fake.requests] == ["POST", "DELETE"]


def test_default_socket_is_the_daemons(monkeypatch):
    monkeypatch.delenv("DSEC_SOCKET", raising=False)
    c = libdsec.Client()
    assert c.endpoint == "unix:/run/dsec-vmm/api.sock" == "unix:" + libdsec.DEFAULT_SOCKET


def test_failed_create_raises_and_sends_nothing_else(fake):
    fake.error(400, "INVALID_ARGUMENT", "tier must be container or fncall", field="tier")
    with pytest.raises(libdsec.InvalidArgument) as e:
        libdsec.Sandbox(tier="nope", socket=fake.socket_path)
    assert e.value.field == "tier"
    assert len(fake.requests) == 1


def test_fncall_takes_a_code_string_and_container_refuses_one(fake):
    fake.reply(201, sandbox_obj("sb-f", tier="fncall"))
    fake.reply(200, exec_obj(stdout_b64="NAo="))
    with libdsec.Sandbox(tier="fncall", socket=fake.socket_path) as f:
        assert f.exec("print(4)").stdout == b"4\n"
        assert fake.last().json == {"code": "print(4)"}
        fake.reply(204)
    fake.reply(201, sandbox_obj("sb-c"))
    c = libdsec.Sandbox(socket=fake.socket_path)
    with pytest.raises(libdsec.InvalidArgument):
        c.exec("echo hi")  # refused before sending: a container runs an argv list
    assert fake.last().path == "/v1/sandboxes"
    fake.reply(204)
    c.close()


def test_files_pack_diff_pause_resume(fake):
    fake.reply(201, sandbox_obj("sb-2"))
    sb = libdsec.Sandbox(socket=fake.socket_path)
    fake.reply(204)
    sb.files.write("/work/a b", b"\x00x", mode=0o600)
    put = fake.last()
    assert (put.method, put.path, put.query["mode"], put.body) == (
        "PUT", "/v1/sandboxes/sb-2/files", ["0600"], b"\x00x")
    fake.reply(200, body=b"data", content_type="application/octet-stream")
    assert sb.files.read("/work/a b") == b"data"
    assert fake.last().query["path"] == ["/work/a b"]
    fake.reply(200, {"entries": [{"name": "a b", "type": "file", "size": 2, "mode": 0o600}]})
    assert [e.name for e in sb.files.list("/work")] == ["a b"]
    fake.reply(200, {"layer": "x:1", "digest": "sha256:00", "size_bytes": 1})
    assert sb.pack_diff()["layer"] == "x:1"
    body = fake.last().json
    assert body["name"].startswith("diff-sb-2-") and body["version"] == "1"
    fake.reply(200, {"layer": "env:2", "digest": "sha256:00", "size_bytes": 1})
    sb.pack_diff("env", "2")
    assert fake.last().json == {"name": "env", "version": "2"}
    fake.reply(200, sandbox_obj("sb-2", state="paused"))
    assert sb.pause().state == "paused"
    fake.reply(200, sandbox_obj("sb-2", state="running"))
    assert sb.resume().state == "running"
    assert fake.last().path == "/v1/sandboxes/sb-2/resume"
    fake.reply(404, {"error": {"code": "NOT_FOUND", "message": "gone"}})
    sb.close()  # already gone (TTL): not an error


def test_task_resume_returns_a_replaying_sandbox_and_the_log(fake):
    task = libdsec.Task("job-1", socket=fake.socket_path)
    fake.reply(201, sandbox_obj("sb-r", task_id="job-1", recorded=2))
    sb = task.resume(tier="container", layers=["base:bookworm"])
    req = fake.last()
    assert (req.method, req.path) == ("POST", "/v1/tasks/job-1/resume")
    assert req.json == {"tier": "container", "layers": ["base:bookworm"]}
    assert (sb.id, sb.recorded, sb.task_id) == ("sb-r", 2, "job-1")
    fake.reply(200, exec_obj(replayed=True, seq=0, stdout_b64="eA=="))
    r = sb.exec(["git", "push"])
    assert r.replayed and r.seq == 0 and r.stdout == b"x"
    fake.reply(200, exec_obj(seq=2, divergence={"seq": 2, "reason": "past-end", "fields": [],
                                                 "not_reapplied": [1]}))
    r = sb.exec(["make"])
    assert r.divergence.reason == "past-end" and r.divergence.not_reapplied == [1]
    fake.reply(204)
    sb.close()
    fake.reply(200, {"records": [{"seq": 0}], "checkpoints": []})
    assert task.records == [{"seq": 0}]
    assert fake.last().path == "/v1/tasks/job-1/log"
    fake.reply(201, sandbox_obj("sb-n", task_id="job-1"))
    task.sandbox(layers=["l:1"])
    assert fake.last().json == {"tier": "container", "layers": ["l:1"], "task_id": "job-1"}
    fake.reply(204)
    task.delete()
    assert (fake.last().method, fake.last().path) == ("DELETE", "/v1/tasks/job-1")
    task.close()


def test_shared_client_is_not_closed_by_the_sandbox(fake):
    client = libdsec.Client(socket_path=fake.socket_path)
    fake.reply(201, sandbox_obj("sb-s"))
    fake.reply(204)
    with libdsec.Sandbox(client=client):
        pass
    fake.reply(200, {"status": "ok"})
    assert client.health() == {"status": "ok"}
    with pytest.raises(ValueError):
        libdsec.Sandbox(client=client, socket="/x")
    client.close()


def test_import_from_the_repo_path_needs_nothing_installed():
    import subprocess, sys
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-S", "-c", "import libdsec; print(libdsec.Sandbox.__name__)"],
                       env={"PYTHONPATH": here, "PATH": "/usr/bin:/bin"}, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "Sandbox\n"), r.stderr

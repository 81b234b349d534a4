# SPDX-License-Identifier: Apache-2.0
"""End to end through libdsec.Sandbox / libdsec.Task against the real daemon:
each tier present, tier switching, bad requests (4xx, no state left),
resume and divergence. Fixtures: conftest.py (`node`)."""

import json
import os

import pytest

import harness
import libdsec


def _sandbox(node, **kw):
    sb = libdsec.Sandbox(socket=node.socket, **kw)
    node.track(sb)
    return sb


# -- container -------------------------------------------------------------------


def test_container_end_to_end(node):
    with _sandbox(node, tier="container", layers=[node.base], qos="ls", memory_mib=128) as sb:
        assert (sb.tier, sb.state) == ("container", "running")
        assert sb.info["qos"] == "ls"
        r = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.exit_code, r.stdout, r.stderr) == (3, b"out\n", b"err\n")
        assert isinstance(r.duration_s, float) and 0 < r.duration_s < 60
        assert r.seq is None and not r.replayed  # no task: nothing recorded
        sb.files.write("/work/in.txt", "hello\n")
        assert sb.files.read("/work/in.txt") == b"hello\n"
        assert "in.txt" in {e.name for e in sb.files.list("/work")}
        assert sb.exec(["cat", "/work/in.txt"]).stdout == b"hello\n"
        assert sb.pause().state == "paused"
        with pytest.raises(libdsec.Conflict):
            sb.exec(["true"])
        assert sb.resume().state == "running"
        out = sb.pack_diff()
        assert out["layer"].startswith("diff-%s-" % sb.id) and out["digest"].startswith("sha256:")
        node.client.remove_layer(out["layer"])
        sid = sb.id
    with pytest.raises(libdsec.NotFound):
        node.client.get(sid)  # the with block deleted it


def test_socket_from_environment(node, monkeypatch):
    monkeypatch.setenv("DSEC_SOCKET", node.socket)
    with libdsec.Sandbox(tier="container", layers=[node.base]) as sb:
        node.track(sb)
        assert sb.client.endpoint == "unix:" + node.socket
        assert sb.exec(["echo", "env"]).stdout == b"env\n"


def test_tcp_with_token(node):
    d = node.daemon
    if not d.url:
        pytest.skip("the daemon offers no --listen/--token-file")
    with pytest.raises(libdsec.Unauthenticated):
        libdsec.Sandbox(tier="container", layers=[node.base], url=d.url, token="wrong")
    with libdsec.Sandbox(tier="container", layers=[node.base], url=d.url, token=d.token) as sb:
        node.track(sb)
        assert sb.exec(["echo", "tcp"]).stdout == b"tcp\n"


# -- fncall ----------------------------------------------------------------------


def _python_layer(node):
    if not node.python_layer:
        pytest.skip("no offline python layer: %s" % node.python_error)
    return [node.python_layer]


def test_fncall_python_end_to_end(node):
    with _sandbox(node, tier="fncall", layers=_python_layer(node)) as sb:
        assert sb.tier == "fncall"
        r = sb.exec("import sys; print(sum(range(10)), sys.argv[1:]); "
                    "sys.stdout.write(sys.stdin.read())", args=["x"], stdin=b"in")
        assert (r.exit_code, r.stdout) == (0, b"45 ['x']\nin")
        assert r.duration_s > 0
        r = sb.exec("import sys; print('e', file=sys.stderr); sys.exit(7)")
        assert (r.exit_code, r.stderr) == (7, b"e\n")
        with pytest.raises(libdsec.Conflict):
            sb.files.read("/etc/passwd")  # fncall keeps no files


def test_switching_tier_is_one_parameter(node):
    results = {}
    for tier in ("container", "fncall"):
        layers = [node.base] if tier == "container" else _python_layer(node)
        cmd = ["sh", "-c", "echo hi"] if tier == "container" else "print('hi')"
        with _sandbox(node, tier=tier, layers=layers) as sb:
            results[tier] = sb.exec(cmd).stdout
    assert results == {"container": b"hi\n", "fncall": b"hi\n"}


# -- bad requests ------------------------------------------------------------------


def _raw(client, method, path, body=None, ctype="application/json"):
    """Sends raw bytes; returns (status, error object or None)."""
    if isinstance(body, (dict, list, str, int)) and ctype == "application/json":
        body = json.dumps(body).encode()
    try:
        resp = client._transport.request(method, path, body=body, content_type=ctype)
        return resp.status, None
    except libdsec.DsecError as e:
        return e.status, e


def _state(node):
    """What the daemon holds: registry, layers, trajectories, the tiers'
    state dirs (a sandbox's cgroups are recorded there before they exist),
    mounts under its temp dir. Cgroups are not listed host-wide: other work
    on this machine creates its own."""
    c = node.client
    tmp = node.daemon.tmp
    layers = sorted("%s:%s" % (l["name"], l["version"]) for l in c.layers())
    state = {d: sorted(os.listdir(os.path.join(tmp, d)))
             for d in ("trajectory", "containers", "fncall")}
    return {"sandboxes": sorted(s.id for s in c.list()), "layers": layers,
            "mounts": sorted(harness._mounts_under(tmp)), "state": state}


def test_bad_requests_get_4xx_and_leave_no_state(node):
    c = node.client
    with _sandbox(node, tier="container", layers=[node.base]) as sb:
        before = _state(node)
        sbp = "/v1/sandboxes/" + sb.id
        task = node.new_task("bad")
        cases = [
            # (method, path, body, expected status, expected field or None)
            ("POST", "/v1/sandboxes", {"tier": "no-such"}, 400, "tier"),
            ("POST", "/v1/sandboxes", {}, 400, "tier"),
            ("POST", "/v1/sandboxes", {"tier": 5}, 400, "tier"),
            ("POST", "/v1/sandboxes", {"tier": "container", "bogus": 1}, 400, "bogus"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": "x"}, 400, "layers"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": [""]}, 400, "layers[0]"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": ["sdkpy-none:9"]}, 400, "layers"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": [node.base], "memory_mib": -5}, 400, "memory_mib"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": [node.base], "cpus": 0}, 400, "cpus"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": [node.base], "pids": 1}, 400, "pids"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": [node.base], "qos": "x"}, 400, "qos"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": [node.base], "ttl_s": 0}, 400, "ttl_s"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": [node.base], "lang": "python"}, 400, "lang"),
            ("POST", "/v1/sandboxes", {"tier": "fncall", "lang": "cobol"}, 400, "lang"),
            ("POST", "/v1/sandboxes", {"tier": "container", "layers": [node.base], "task_id": "../x"}, 400, "task_id"),
            ("POST", "/v1/sandboxes", b"{not json", 400, None),
            ("POST", "/v1/sandboxes", [1, 2], 400, None),
            ("POST", "/v1/sandboxes", b"x" * (2 << 20), 413, None),
            ("GET", "/v1/sandboxes/sb-doesnotexist", None, 404, None),
            ("DELETE", "/v1/sandboxes/sb-doesnotexist", None, 404, None),
            ("POST", "/v1/sandboxes/sb-doesnotexist/exec", {"argv": ["true"]}, 404, None),
            ("POST", sbp + "/exec", {}, 400, "argv"),
            ("POST", sbp + "/exec", {"argv": []}, 400, "argv"),
            ("POST", sbp + "/exec", {"argv": "true"}, 400, "argv"),
            ("POST", sbp + "/exec", {"argv": ["a\u0000b"]}, 400, "argv"),
            ("POST", sbp + "/exec", {"code": "print(1)"}, 400, "code"),
            ("POST", sbp + "/exec", {"argv": ["true"], "nope": 1}, 400, "nope"),
            ("POST", sbp + "/exec", {"argv": ["true"], "timeout_s": -1}, 400, "timeout_s"),
            ("POST", sbp + "/exec", {"argv": ["true"], "env": []}, 400, "env"),
            ("POST", sbp + "/exec", {"argv": ["true"], "env": {"A=B": "x"}}, 400, "env"),
            ("POST", sbp + "/exec", {"argv": ["true"], "cwd": "rel"}, 400, "cwd"),
            ("POST", sbp + "/exec", {"argv": ["true"], "stdin_b64": "!!"}, 400, "stdin_b64"),
            ("POST", sbp + "/exec", {"argv": ["true"], "stdin": "a", "stdin_b64": "YQ=="}, 400, "stdin_b64"),
            ("POST", sbp + "/exec", {"argv": ["true"], "idempotent": "yes"}, 400, "idempotent"),
            ("POST", sbp + "/exec/stream", {"argv": 1}, 400, "argv"),
            ("GET", sbp + "/files?path=relative", None, 400, "path"),
            ("GET", sbp + "/files?path=/work/missing", None, 404, None),
            ("PUT", sbp + "/files?path=/work/x&mode=99", b"data", 400, "mode"),
            ("GET", sbp + "/files/list?path=/nonexistent-dir", None, 404, None),
            ("POST", sbp + "/pack_diff", {}, 400, "name"),
            ("POST", sbp + "/pack_diff", {"name": "a/b", "version": "1"}, 400, "name"),
            ("POST", "/v1/layers", {"name": "x", "version": "1", "path": "relative"}, 400, "path"),
            ("POST", "/v1/layers", {"name": "x:y", "version": "1", "path": "/tmp"}, 400, "name"),
            ("DELETE", "/v1/layers/sdkpy-none:9", None, 404, None),
            ("GET", "/v1/tasks/%s/log" % task, None, 404, None),
            ("POST", "/v1/tasks/%s/resume" % task, {"tier": "container", "layers": [node.base]}, 404, None),
            ("POST", "/v1/tasks/.hidden/resume", {"tier": "container"}, 400, "task_id"),
            ("DELETE", "/v1/tasks/%s" % task, None, 404, None),
            ("GET", "/v1/no-such-endpoint", None, 404, None),
        ]
        bad = []
        for method, path, body, status, field in cases:
            got, err = _raw(c, method, path, body)
            ok = got == status and (field is None or (err is not None and err.field == field))
            if err is not None and not (isinstance(err.message, str) and err.message):
                ok = False
            if not ok:
                bad.append("%s %s %r: expected %d field=%s, got %s %s" % (
                    method, path, body if not isinstance(body, bytes) else body[:20], status,
                    field, got, err))
        assert bad == [], "\n".join(bad)
        # The sandbox used above is unharmed, and nothing else appeared.
        assert sb.exec(["echo", "ok"]).stdout == b"ok\n"
        assert _state(node) == before
    assert harness.host_leaks(node.daemon.tmp, [sb.id]) == {}


# -- trajectory ---------------------------------------------------------------------

NONCE = ["sh", "-c", "cat /proc/sys/kernel/random/uuid | tee -a /work/ran"]


def test_task_resume_replays_then_diverges(node):
    task_id = node.new_task("div")
    task = libdsec.Task(task_id, socket=node.socket)
    with task.sandbox(layers=[node.base]) as sb:
        node.track(sb)
        first = sb.exec(NONCE)
        second = sb.exec(["sh", "-c", "echo two; exit 4"])
        assert (first.seq, second.seq) == (0, 1)
    assert [r["seq"] for r in task.records] == [0, 1]

    # Same first command, different second one: replay, then divergence.
    with task.resume(tier="container", layers=[node.base]) as sb:
        node.track(sb)
        assert sb.recorded == 2
        r0 = sb.exec(NONCE)
        assert r0.replayed and r0.stdout == first.stdout  # not a fresh uuid: not run
        r1 = sb.exec(["sh", "-c", "echo other"])
        assert not r1.replayed
        assert r1.divergence.reason == "differs" and r1.divergence.seq == 1
        assert "argv" in r1.divergence.fields
        assert r1.stdout == b"other\n"
        # The replayed command did not run in this sandbox: /work/ran is absent.
        live = sb.exec(["sh", "-c", "cat /work/ran 2>/dev/null | wc -l"])
        assert live.stdout.strip() == b"0" and not live.replayed
    log = task.log()
    assert [r["seq"] for r in log["records"]] == [0, 1, 2]
    task.delete()
    with pytest.raises(libdsec.NotFound):
        task.log()
    task.close()

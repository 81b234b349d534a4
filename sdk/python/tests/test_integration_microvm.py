# SPDX-License-Identifier: Apache-2.0
"""The microvm tier end to end through the SDK and a real daemon: Linux
guests under dsec-vmm's own monitor, booted from the host's layer store
(base:bookworm through virtio-pmem with DAX). Runs where guest kernel code
is not emulated: in L1 of the nested bed (ctest nested_microvm_sdk_test);
on this PVM host the tier answers 503 and every test skips with its reason.

The attacks of tests/security that make sense inside a VM run here too
(test_attack_*): `yes` flooding stdout, calls to the
host from inside (vsock to the host CID, TCP), an overwritten /bin/bash,
FICLONE/SWAPEXT/BLKDISCARD on the guest's own file systems and pmem disks.

Checked: create, commands.run (shell string, argv, exit codes, stdin,
timeout), exec_stream, files write/read/list, pause/resume, the E2B JS SDK
through the daemon's E2B API (sandbox/e2b/sdk_test/microvm.mjs), a TTL that
expires, kill; pack_diff of a microVM's changes into a layer that a
container sandbox and a second microVM then use; fork and snapshot of a
running microVM whose children, and a sandbox made from the snapshot after
a daemon restart, go on with its processes (and the latter with the host's
wall time); kill -9 of the daemon with
live microVMs, then a restart that leaves no monitor, cgroup or mount.
"""

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import threading
import time

import pytest

import harness
import libdsec
from conftest import require_daemon

STORE = os.environ.get("DSEC_LAYER_STORE", "/var/lib/dsec-vmm/layers")
BASE = "base:bookworm"
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _agent():
    return os.path.join(os.path.dirname(os.environ["DSEC_VMMD"]), "guest-kernel", "agent", "dsec-agent")


@pytest.fixture(scope="module")
def mvm(tmp_path_factory):
    """A daemon with the microvm tier on the host's layer store."""
    require_daemon()
    if not os.path.exists(_agent()):
        pytest.skip("no dsec-agent at %s" % _agent())
    probe = subprocess.run([os.environ["DSEC_VMMD"].replace("dsec-vmmd", "dsec-vmm"), "layer",
                            "--store", STORE, "inspect", BASE], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("no %s in %s (tools/setup.sh builds it)" % (BASE, STORE))
    tmp = str(tmp_path_factory.mktemp("mvm"))
    rootfs = os.path.join(tmp, "rootfs.erofs")
    r = subprocess.run([os.path.join(SOURCE, "tools", "build-guest-image.sh"), _agent(), rootfs],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    extra = ["--microvm-rootfs", rootfs, "--microvm-state-dir", os.path.join(tmp, "microvm")]
    # The E2B API too, with a template on the microvm tier
    # (test_e2b_sdk_drives_a_microvm).
    d_e2b = None
    if harness.offers(harness._help_text(os.environ["DSEC_VMMD"]), "--e2b-listen"):
        keys = os.path.join(tmp, "e2b-keys")
        key = "e2b_" + secrets.token_hex(20)
        with open(keys, "w") as f:
            f.write(key + "\n")
        templates = os.path.join(tmp, "e2b-templates.json")
        r = subprocess.run([os.environ["DSEC_VMMD"].replace("dsec-vmmd", "dsec-vmm"), "template", "--file",
                            templates, "add", "mvm", "--layers", BASE, "--tier", "microvm"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        port = harness.free_port()
        extra += ["--e2b-listen", "127.0.0.1:%d" % port, "--e2b-api-key-file", keys,
                  "--e2b-templates", templates]
        d_e2b = {"url": "http://127.0.0.1:%d" % port, "key": key, "template": "mvm"}
    d = harness.Daemon(tmp, store=STORE, extra_args=extra)
    d.e2b = d_e2b
    d.start()
    client = d.client(timeout=180)
    try:
        sb = libdsec.Sandbox.create(tier="microvm", layers=[BASE], socket=d.socket, timeout=600)
    except libdsec.DsecError as e:
        d.stop()
        if e.status == 503:
            pytest.skip("microvm tier unavailable here: %s" % e)
        raise
    sb.kill()
    yield d
    client.close()
    d.stop()


def _create(d, **kw):
    kw.setdefault("layers", [BASE])
    kw.setdefault("timeout", 600)
    return libdsec.Sandbox.create(tier="microvm", socket=d.socket, **kw)


def test_run_stream_files_pause_resume_kill(mvm):
    with _create(mvm, memory_mib=256) as sb:
        assert sb.tier == "microvm"
        r = sb.commands.run("echo out; echo err >&2; exit 3")
        assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
        r = sb.commands.run(["uname", "-s"])
        assert (r.exit_code, r.stdout) == (0, "Linux\n")
        r = sb.commands.run("cat", stdin="from stdin")
        assert r.stdout == "from stdin"
        r = sb.commands.run("sleep 30", timeout=1)
        assert r.exit_code is None and r.exec_result.timed_out

        stream = sb.exec_stream(["sh", "-c", "echo a; sleep 1; echo b"])
        got = [data for name, data in stream if name == "stdout"]
        assert b"".join(got) == b"a\nb\n"
        assert stream.result is not None and stream.result.exit_code == 0

        sb.files.write("/root/d/f.txt", "héllo\n")
        assert sb.files.read("/root/d/f.txt") == "héllo\n"
        names = {e.name for e in sb.files.list("/root/d")}
        assert names == {"f.txt"}
        with pytest.raises(libdsec.NotFound):
            sb.files.read("/root/missing")

        assert sb.pause().state == "paused"
        with pytest.raises(libdsec.Conflict):
            sb.commands.run("true")
        sb.resume()
        assert sb.commands.run("cat /root/d/f.txt").stdout == "héllo\n"
        assert sb.kill() is True
        with pytest.raises(libdsec.NotFound):
            libdsec.Sandbox.connect(sb.sandbox_id, socket=mvm.socket)


def test_a_pause_stands_the_guests_clocks_and_its_commands_timeouts_still(mvm):
    with _create(mvm, memory_mib=256) as sb:
        source = sb.commands.run(
            "cat /sys/devices/system/clocksource/clocksource0/current_clocksource").stdout.strip()
        up_before = float(sb.commands.run("cat /proc/uptime").stdout.split()[0])
        host_before = time.monotonic()
        # 3 s of work under a 5 s timeout, paused 6 s in the middle: the
        # pause must use up neither the guest's timeout nor the host's.
        done = {}

        def run():
            done["r"] = sb.commands.run("sleep 3; cat /proc/uptime", timeout=5)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(1)
        assert sb.pause().state == "paused"
        time.sleep(6)
        sb.resume()
        t.join(60)
        assert not t.is_alive()
        host_elapsed = time.monotonic() - host_before
        r = done["r"]
        assert r.exit_code == 0 and not r.exec_result.timed_out, (source, r)
        guest_elapsed = float(r.stdout.split()[0]) - up_before
        # The guest saw its 3 s of sleep and the calls, not the 6 s pause.
        assert host_elapsed >= 9
        assert guest_elapsed < host_elapsed - 4, (source, guest_elapsed, host_elapsed)
        # Its wall clock was set to the host's at the resume.
        guest_now = float(sb.commands.run("date +%s.%N").stdout)
        assert abs(guest_now - time.time()) < 1.5, (source, guest_now - time.time())


def _e2b_sdk():
    d = os.path.join(os.environ.get("DSEC_CACHE_DIR", os.path.expanduser("~/.cache/dsec-vmm")), "npm-e2b")
    return d if os.path.exists(os.path.join(d, "node_modules", "e2b", "package.json")) else None


def test_e2b_sdk_drives_a_microvm(mvm, tmp_path):
    """The real E2B JS SDK against the daemon's E2B API, with a template on
    the microvm tier: create, streamed commands and exit codes, stdin of a
    background command, a kill of one command, files, watchDir (inotify in
    the guest), kill (sandbox/e2b/sdk_test/microvm.mjs)."""
    if mvm.e2b is None:
        pytest.skip("this dsec-vmmd has no --e2b-listen")
    node = shutil.which("node")
    sdk = _e2b_sdk()
    if node is None or sdk is None:
        pytest.skip("no node or no E2B SDK in the cache (tools/setup.sh installs both)")
    script = tmp_path / "microvm.mjs"
    shutil.copy(os.path.join(SOURCE, "sandbox", "e2b", "sdk_test", "microvm.mjs"), script)
    os.symlink(os.path.join(sdk, "node_modules"), tmp_path / "node_modules")
    env = dict(os.environ, E2B_API_URL=mvm.e2b["url"], E2B_SANDBOX_URL=mvm.e2b["url"],
               E2B_API_KEY=mvm.e2b["key"], E2B_TEST_TEMPLATE=mvm.e2b["template"])
    r = subprocess.run([node, str(script)], env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout + r.stderr + "\n--- daemon\n" + mvm.log_tail()
    assert "all ok" in r.stdout


def test_a_ttl_ends_the_microvm(mvm):
    sb = _create(mvm, timeout=3)
    # The API has no event for a sandbox's end; the host has one: the
    # sandbox's processes (its monitor) exit, which their pidfds report.
    # The daemon forgets the sandbox before it stops them.
    # On a loaded L1 the boot can take most of the 3 s: then its processes
    # are gone already, which the checks below also prove.
    pids = harness.processes_naming([sb.sandbox_id])
    if pids and not harness.wait_exited(pids, 60):
        sb.kill()
        pytest.fail("the TTL did not end the sandbox within 60 s")
    with pytest.raises(libdsec.NotFound):
        libdsec.Sandbox.connect(sb.sandbox_id, socket=mvm.socket)
    assert mvm.leaks([sb.sandbox_id]) == {}


def test_pack_diff_gives_a_layer_a_container_and_another_microvm_use(mvm):
    name = "sdkpy-mvm-%s" % secrets.token_hex(4)
    with _create(mvm) as sb:
        sb.commands.run("mkdir -p /opt/tool && echo built-in-a-vm > /opt/tool/marker")
        layer = sb.pack_diff(name=name, version="1")
    ref = "%s:1" % name
    try:
        assert layer["layer"] == ref, layer
        with libdsec.Sandbox.create(tier="container", layers=[BASE, ref], socket=mvm.socket) as c:
            assert c.commands.run("cat /opt/tool/marker").stdout == "built-in-a-vm\n"
        with _create(mvm, layers=[BASE, ref]) as again:
            assert again.commands.run("cat /opt/tool/marker").stdout == "built-in-a-vm\n"
    finally:
        subprocess.run([os.environ["DSEC_VMMD"].replace("dsec-vmmd", "dsec-vmm"), "layer",
                        "--store", STORE, "rm", ref], capture_output=True)


def test_kill9_of_the_daemon_then_a_restart_leaves_nothing(mvm):
    ids = []
    for _ in range(2):
        ids.append(_create(mvm).sandbox_id)
    mvm.kill9()
    mvm.start()
    assert mvm.leaks(ids) == {}
    monitors = subprocess.run(["pgrep", "-f", "dsec-monitor --config %s" % mvm.tmp],
                              capture_output=True, text=True).stdout.split()
    assert monitors == []


def _ticks(sb):
    return int(sb.commands.run("cat /tmp/ticks").stdout.strip() or 0)


def _running(sb, pid):
    return sb.commands.run("kill -0 %s" % pid).exit_code == 0


def _wait_ticking(sb, pid):
    """The counter of the loop `pid` grows (bounded: 60 s)."""
    first = _ticks(sb)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _ticks(sb) > first:
            return
        time.sleep(0.2)
    pytest.fail("the loop %s of %s does not count (%d, running: %s)"
                % (pid, sb.sandbox_id, first, _running(sb, pid)))


def _tags(ref):
    """The layer store's tags of the layer `ref` names."""
    r = subprocess.run([os.environ["DSEC_VMMD"].replace("dsec-vmmd", "dsec-vmm"), "layer",
                        "--store", STORE, "inspect", ref], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["tags"]


def test_fork_and_snapshot_carry_the_running_guest(mvm):
    machines = os.path.join(mvm.tmp, "snapshots", "machines")
    made = []
    # A save writes the guest's memory at the nested bed's disk rate.
    with _create(mvm, memory_mib=256, request_timeout=300) as src:
        made.append(src.sandbox_id)
        # A process that lives in the guest's memory only: a shell loop
        # counting into the guest's tmpfs.
        r = src.commands.run("echo before > /root/state; "
                             "(i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks; sleep 0.1; done) "
                             ">/dev/null 2>&1 </dev/null & echo $!")
        loop = r.stdout.strip()
        assert r.exit_code == 0 and loop.isdigit(), r
        _wait_ticking(src, loop)

        children = src.fork(2, timeout=600)
        made.extend(c.sandbox_id for c in children)
        assert children.forked == "machine", children.processes
        assert children.layer is None
        # The saved machine went once the children had mapped it.
        assert sorted(os.listdir(machines)) == ["staging"]
        # Each draws random bytes of its own, first thing: clones of one
        # save share its CRNG state until their kernels reseed (up to a
        # minute later), unless the host reseeds every restored guest.
        draws = [c.commands.run("head -c 32 /dev/urandom | od -An -tx1").stdout for c in children]
        assert len(draws[0].split()) == 32 and draws[0] != draws[1], draws
        for c in children:
            assert c.commands.run("cat /root/state").stdout == "before\n"
            assert _running(c, loop), "the loop was not carried into %s" % c.sandbox_id
            _wait_ticking(c, loop)
        # Each goes on by itself: a write in one is not seen elsewhere.
        children[0].files.write("/root/state", "child-0\n")
        assert children[1].files.read("/root/state") == "before\n"
        assert src.files.read("/root/state") == "before\n"
        _wait_ticking(src, loop)

        snapshot = src.snapshot()
        info = libdsec.Client(socket_path=mvm.socket).snapshots()
        record = [s for s in info if s["id"] == snapshot][0]
        assert record["captured"] == "machine", record
        assert os.path.exists(os.path.join(machines, snapshot, "manifest.json"))
        # The layers its guest maps are tagged for it: `layer gc` keeps them.
        assert "pin-%s:image-0" % snapshot in _tags(BASE), _tags(BASE)
        for c in children:
            c.kill()
    # Each sandbox's staging directory went with it.
    assert os.listdir(os.path.join(machines, "staging")) == []

    # The snapshot outlives the daemon; a sandbox made from it goes on with
    # the loop and the files of the moment it was taken, and with the
    # host's wall time, not the snapshot's (it stood saved for a while).
    saved_at = time.time()
    mvm.kill9()
    time.sleep(max(0.0, saved_at + 20 - time.time()))
    mvm.start()
    assert mvm.leaks(made) == {}
    client = libdsec.Client(socket_path=mvm.socket)
    try:
        with libdsec.Sandbox.create(snapshot=snapshot, socket=mvm.socket, timeout=600,
                                    request_timeout=300) as again:
            assert again.tier == "microvm"
            guest_now = float(again.commands.run("date +%s.%N").stdout)
            assert abs(guest_now - time.time()) < 5, (guest_now, time.time())
            assert again.commands.run("cat /root/state").stdout == "before\n"
            assert _running(again, loop)
            _wait_ticking(again, loop)
            made.append(again.sandbox_id)
    finally:
        client.delete_snapshot(snapshot)
        client.close()
    assert not os.path.exists(os.path.join(machines, snapshot))
    assert not [t for t in _tags(BASE) if t.startswith("pin-%s:" % snapshot)], _tags(BASE)
    assert mvm.leaks(made) == {}


# -- attacks (tests/security, against this tier) -----------------------------------


def _probe():
    path = os.path.join(os.path.dirname(os.environ["DSEC_VMMD"]), "tests", "security",
                        "container_attack_probe")
    if not os.path.exists(path):
        pytest.skip("no attack probe at %s" % path)
    return path


def _with_probe(sb):
    with open(_probe(), "rb") as f:
        sb.files.write("/root/probe", f.read())
    assert sb.commands.run("chmod 0755 /root/probe").exit_code == 0
    return lambda *args: sb.commands.run(["/root/probe"] + list(args)).stdout.strip()


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _base_image():
    out = subprocess.run([os.environ["DSEC_VMMD"].replace("dsec-vmmd", "dsec-vmm"), "layer",
                          "--store", STORE, "inspect", BASE], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)["image"]


def test_attack_yes_floods_are_capped_at_the_host(mvm):
    # 12 MB of `yes` against the daemon's 4 MiB cap per exec: the rest is
    # dropped in the guest's agent, never buffered on the host. (The serial
    # console's cap is the monitor's, tested with the test guest in
    # tests/integration/vm_cli_test; a Linux guest under emulation writes
    # too slowly to reach it in a test's time.)
    with _create(mvm) as sb:
        r = sb.commands.run("yes | head -c 12000000", timeout=600)
        res = r.exec_result
        assert res.exit_code == 0 or res.killed_by == "output", res
        assert len(res.stdout) <= 4 << 20 and res.stdout_dropped > 0, (len(res.stdout), res.stdout_dropped)
        assert len(res.stdout) + res.stdout_dropped == 12000000 or res.killed_by == "output"
        assert sb.commands.run("echo alive").stdout == "alive\n"


def test_attack_calls_to_the_host_are_unreachable(mvm):
    with _create(mvm) as sb:
        probe = _with_probe(sb)
        # No network interface but lo, so no route to the node or beyond.
        assert sb.commands.run("ls /sys/class/net").stdout.split() == ["lo"]
        assert probe("connect-inet", "10.0.2.2", "80") in ("ENETUNREACH", "EHOSTUNREACH")
        # (the guest's own loopback: down or refused, never the host's)
        assert probe("connect-inet", "127.0.0.1", "80") in ("ENETUNREACH", "ECONNREFUSED")
        # vsock to the host: nothing listens for the guest on any port (the
        # agent's connection is made by the host, to the guest).
        for port in ("1024", "5000", "10000", "52"):
            assert probe("connect-vsock", "2", port) in ("ECONNRESET", "ECONNREFUSED"), port


def test_attack_an_overwritten_bash_does_not_reach_the_next_sandbox(mvm):
    image = _base_image()
    before = _sha256(image)
    with _create(mvm) as sb:
        r = sb.commands.run("printf '#!/bin/sh\\necho pwned\\n' > /bin/bash; /bin/bash -c 'echo x'")
        assert r.stdout == "pwned\n"
    with _create(mvm) as sb2:
        r = sb2.commands.run(["/bin/bash", "-c", "echo clean"])
        assert r.stdout == "clean\n"
    assert _sha256(image) == before


def test_attack_block_ioctls_on_the_guests_own_disks_are_harmless(mvm):
    image = _base_image()
    before = _sha256(image)
    with _create(mvm) as sb:
        probe = _with_probe(sb)
        sb.commands.run("echo data > /root/f")
        for what in ("ficlone", "swapext", "fideduperange"):
            probe("ioctl", what, "/root/f")  # the guest's own upper layer: any answer
        # The layers' pmem disks are read-only to the guest.
        assert probe("ioctl", "blkdiscard", "/dev/pmem1") in ("EPERM", "EROFS", "EACCES", "EBADF", "EOPNOTSUPP")
        assert sb.commands.run("echo alive").stdout == "alive\n"
    assert _sha256(image) == before

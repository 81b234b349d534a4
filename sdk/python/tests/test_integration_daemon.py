# SPDX-License-Identifier: Apache-2.0
"""Integration tests: the SDK against the real node daemon.

Needs $DSEC_VMMD (the daemon binary), root, /bin/busybox (static) and
mkfs.erofs; skips with the reason otherwise. The daemon runs on a socket,
state, trajectory and layer-store directories of its own in a temp dir, and
the test builds a busybox layer through the API. Everything is removed at
the end, also when a test fails.
"""

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402
import libdsec  # noqa: E402

_daemon = None   # running daemon state (dict), set by setUpModule
START_TIMEOUT_S = 30


def _skip(reason):
    raise unittest.SkipTest(reason)


def _is_static(path):
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return False
        phoff = int.from_bytes(head[32:40], "little")
        phentsize = int.from_bytes(head[54:56], "little")
        phnum = int.from_bytes(head[56:58], "little")
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            if int.from_bytes(f.read(4), "little") == 3:  # PT_INTERP
                return False
    return True


def build_busybox_tree(root):
    """A minimal root: static busybox with its applet links, passwd, group."""
    os.makedirs(os.path.join(root, "bin"))
    for d in ("etc", "root", "tmp", "work"):
        os.makedirs(os.path.join(root, d))
    os.chmod(os.path.join(root, "tmp"), 0o1777)
    shutil.copy2("/bin/busybox", os.path.join(root, "bin", "busybox"))
    applets = subprocess.run(["/bin/busybox", "--list"], check=True, capture_output=True,
                             text=True).stdout.split()
    for a in applets:
        if a != "busybox":
            os.symlink("busybox", os.path.join(root, "bin", a))
    if "bash" not in applets:  # fncall lang="bash" runs `bash`; busybox's sh stands in
        with open(os.path.join(root, "bin", "bash"), "w") as f:
            f.write('#!/bin/sh\nexec /bin/sh "$@"\n')
        os.chmod(os.path.join(root, "bin", "bash"), 0o755)
    with open(os.path.join(root, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
    with open(os.path.join(root, "etc", "group"), "w") as f:
        f.write("root:x:0:\nnogroup:x:65534:\n")


def _help_text(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return out.stdout + out.stderr


def _offers(text, flag):
    return re.search(r"(^|[\s,])%s\b" % re.escape(flag), text, re.M) is not None


# The daemon's directories, each pointed into the test's temp dir.
DIR_FLAGS = [("--container-state-dir", "containers"), ("--fncall-state-dir", "fncall"),
             ("--trajectory-dir", "trajectory"), ("--store", "layers"),
             ("--snapshot-dir", "snapshots")]


def daemon_command(binary, tmp, token_file, port):
    """The daemon's command line (flags as listed by dsec-vmmd --help)."""
    text = _help_text(binary)
    missing = [f for f in ["--socket"] + [f for f, _ in DIR_FLAGS] if not _offers(text, f)]
    if missing:
        raise RuntimeError("%s --help lacks %s:\n%s" % (binary, ", ".join(missing), text))
    cmd = [binary, "--socket", os.path.join(tmp, "run", "api.sock")]
    for flag, sub in DIR_FLAGS:
        os.makedirs(os.path.join(tmp, sub), mode=0o700, exist_ok=True)
        cmd += [flag, os.path.join(tmp, sub)]
    if _offers(text, "--listen") and _offers(text, "--token-file"):
        cmd += ["--listen", "127.0.0.1:%d" % port, "--token-file", token_file]
    return cmd


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def setUpModule():
    global _daemon
    binary = os.environ.get("DSEC_VMMD")
    if not binary:
        _skip("DSEC_VMMD is not set (path of the dsec-vmmd daemon binary)")
    if not os.access(binary, os.X_OK):
        _skip("DSEC_VMMD=%s is missing or not executable" % binary)
    if os.geteuid() != 0:
        _skip("the daemon needs root (namespaces, cgroups, mounts)")
    if not os.path.exists("/bin/busybox") or not _is_static("/bin/busybox"):
        _skip("no static /bin/busybox (apt-get install busybox-static)")
    if not shutil.which("mkfs.erofs"):
        _skip("no mkfs.erofs (apt-get install erofs-utils)")
    tmp = tempfile.mkdtemp(prefix="dsec-sdk-it-")
    state = {"tmp": tmp, "proc": None, "layers": [], "tasks": [], "sandboxes": []}
    try:
        token = secrets.token_hex(16)
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        os.chmod(token_file, 0o600)
        port = _free_port()
        cmd = daemon_command(binary, tmp, token_file, port)
        os.makedirs(os.path.join(tmp, "run"), mode=0o700, exist_ok=True)
        log = open(os.path.join(tmp, "daemon.log"), "ab")
        state["log"] = log
        state["cmd"] = cmd
        # Ready is an event: the "dsec-vmmd ready" line on its stdout (a
        # pipe; its end of file means it exited). Logs go to stderr.
        state["proc"] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True)
        state["socket"] = cmd[cmd.index("--socket") + 1]
        state["url"] = "http://127.0.0.1:%d" % port if "--listen" in cmd else None
        state["token"] = token
        client = libdsec.Client(socket_path=state["socket"], timeout=120)
        state["client"] = client
        _daemon = state
        ready = harness.read_ready_line(state["proc"].stdout, time.monotonic() + START_TIMEOUT_S)
        threading.Thread(target=harness.copy_to_file, daemon=True,
                         args=(state["proc"].stdout, os.path.join(tmp, "daemon.log"))).start()
        if ready is None:
            raise RuntimeError("daemon did not become ready on %s within %ds (exit %s):\n%s"
                               % (state["socket"], START_TIMEOUT_S, state["proc"].poll(), daemon_log()))
        state["health"] = client.health()
        tree = os.path.join(tmp, "busybox-tree")
        build_busybox_tree(tree)
        name = "sdkit-bb-" + secrets.token_hex(4)
        client.build_layer(name, "1", tree)
        state["layers"].append(name + ":1")
        state["base"] = name + ":1"
    except BaseException:
        _daemon = state
        tearDownModule()
        raise


def daemon_log():
    if not _daemon or "log" not in _daemon:
        return ""
    path = os.path.join(_daemon["tmp"], "daemon.log")
    try:
        with open(path, "rb") as f:
            return f.read()[-4000:].decode("utf-8", "replace")
    except OSError:
        return ""


def tearDownModule():
    global _daemon
    state, _daemon = _daemon, None
    if state is None:
        return
    client = state.get("client")
    proc = state.get("proc")
    if client is not None and proc is not None and proc.poll() is None:
        for sid in state["sandboxes"]:
            try:
                client.delete(sid)
            except libdsec.DsecError:
                pass
        for task in state["tasks"]:
            try:
                client.delete_task(task)
            except libdsec.DsecError:
                pass
        for ref in reversed(state["layers"]):
            try:
                client.remove_layer(ref)
            except libdsec.DsecError:
                pass
        client.close()
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    if "log" in state:
        state["log"].close()
    shutil.rmtree(state["tmp"], ignore_errors=True)


class DaemonTest(unittest.TestCase):
    def setUp(self):
        if _daemon is None:
            self.skipTest("daemon not started")
        self.client = _daemon["client"]
        self.base = _daemon["base"]

    def create(self, **kw):
        kw.setdefault("tier", "container")
        if kw["tier"] == "container":
            kw.setdefault("layers", [self.base])
        sb = self.client.create(**kw)
        _daemon["sandboxes"].append(sb.id)
        self.addCleanup(self._delete, sb)
        return sb

    def _delete(self, sb):
        try:
            sb.delete()
        except libdsec.NotFound:
            pass

    def new_task(self):
        task = "sdkit-task-" + secrets.token_hex(6)
        _daemon["tasks"].append(task)
        self.addCleanup(self._delete_task, task)
        return task

    def _delete_task(self, task):
        try:
            self.client.delete_task(task)
        except libdsec.NotFound:
            pass


class NodeTest(DaemonTest):
    def test_health(self):
        h = self.client.health()
        self.assertEqual(h["status"], "ok")
        self.assertTrue(h["tiers"]["container"], h)
        self.assertIsInstance(h["sandboxes"], int)
        self.assertIsInstance(h["version"], str)

    def test_metrics_are_prometheus_text(self):
        text = self.client.metrics()
        self.assertTrue(any(l.startswith("# TYPE ") for l in text.splitlines()), text[:500])

    def test_layers_list_the_test_layer(self):
        refs = ["%s:%s" % (l["name"], l["version"]) for l in self.client.layers()]
        self.assertIn(self.base, refs)

    def test_bad_requests_name_the_field(self):
        with self.assertRaises(libdsec.InvalidArgument) as cm:
            self.client.create(tier="no-such-tier")
        self.assertEqual(cm.exception.field, "tier")
        with self.assertRaises(libdsec.InvalidArgument) as cm:
            self.client.create(tier="container", layers=[self.base], memory_mib=-5)
        self.assertEqual(cm.exception.field, "memory_mib")
        with self.assertRaises(libdsec.NotFound):
            self.client.get("sb-does-not-exist")
        with self.assertRaises((libdsec.NotFound, libdsec.InvalidArgument)) as cm:
            self.client.create(tier="container", layers=["sdkit-none:0"])
        if isinstance(cm.exception, libdsec.InvalidArgument):
            self.assertEqual(cm.exception.field, "layers")

    def test_tcp_needs_the_token(self):
        if not _daemon.get("url"):
            self.skipTest("daemon --help offers no --listen/--token-file")
        with self.assertRaises(libdsec.Unauthenticated):
            libdsec.Client(url=_daemon["url"]).health()
        with self.assertRaises(libdsec.Unauthenticated):
            libdsec.Client(url=_daemon["url"], token="wrong").health()
        c = libdsec.Client(url=_daemon["url"], token=_daemon["token"])
        self.addCleanup(c.close)
        self.assertEqual(c.health()["status"], "ok")


class ContainerTest(DaemonTest):
    def test_create_exec_delete(self):
        sb = self.create(memory_mib=128, pids=64)
        self.assertEqual((sb.tier, sb.state), ("container", "running"))
        self.assertEqual(self.client.get(sb.id).id, sb.id)
        self.assertIn(sb.id, [s.id for s in self.client.list()])
        r = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, b"out\n", b"err\n"))
        self.assertFalse(r.ok)
        r = sb.exec(["sh", "-c", 'echo "$FOO" "$(pwd)"'], env={"FOO": "bar"}, cwd="/tmp")
        self.assertEqual(r.check().text, "bar /tmp\n")
        sb.delete()
        with self.assertRaises(libdsec.NotFound):
            self.client.get(sb.id)

    def test_threads_share_one_client(self):
        errors, ids = [], []
        lock = threading.Lock()

        def work(n):
            try:
                for i in range(3):
                    with self.client.create(tier="container", layers=[self.base]) as sb:
                        with lock:
                            ids.append(sb.id)
                            _daemon["sandboxes"].append(sb.id)
                        r = sb.exec(["sh", "-c", "echo %d-%d" % (n, i)]).check()
                        if r.stdout != b"%d-%d\n" % (n, i):
                            raise AssertionError("thread %d got %r" % (n, r.stdout))
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(errors, [])
        self.assertEqual(len(set(ids)), 18)
        live = {s.id for s in self.client.list()}
        self.assertFalse(live & set(ids))

    def test_binary_stdin_stdout_round_trip(self):
        sb = self.create()
        data = bytes(range(256)) * 4
        r = sb.exec(["cat"], stdin=data).check()
        self.assertEqual(r.stdout, data)
        self.assertEqual(sb.exec(["cat"], stdin="héllo").check().stdout, "héllo".encode())

    def test_timeout(self):
        sb = self.create()
        r = sb.exec(["sleep", "30"], timeout_s=1)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.killed_by, "timeout")

    def test_limits_and_signals_are_reported(self):
        sb = self.create()
        r = sb.exec(["sh", "-c", "kill -9 $$"])
        self.assertEqual((r.exit_code, r.signal), (None, 9))
        self.assertFalse(r.ok)
        r = sb.exec(["sh", "-c", "yes | head -c 20000000"])
        self.assertGreater(r.stdout_dropped, 0)
        self.assertEqual(len(r.stdout) + r.stdout_dropped, 20000000)
        with self.assertRaises(libdsec.ResourceExhausted) as cm:
            sb.exec(["cat"], stdin=b"x" * (2 << 20))  # JSON body over 1 MiB
        self.assertEqual(cm.exception.status, 413)

    def test_exec_stream(self):
        sb = self.create()
        stream = sb.exec_stream(["sh", "-c", "echo a; echo b >&2; echo c"])
        chunks = list(stream)
        self.assertEqual(b"".join(d for s, d in chunks if s == "stdout"), b"a\nc\n")
        self.assertEqual(b"".join(d for s, d in chunks if s == "stderr"), b"b\n")
        self.assertEqual(stream.result.exit_code, 0)
        self.assertEqual(stream.result.stdout, b"a\nc\n")

    def test_files(self):
        sb = self.create()
        blob = bytes(range(256)) + b"end"
        sb.write_file("/work/sub dir/blob.bin", blob, mode=0o600)
        self.assertEqual(sb.read_file("/work/sub dir/blob.bin"), blob)
        r = sb.exec(["sh", "-c", "stat -c %a '/work/sub dir/blob.bin'"]).check()
        self.assertEqual(r.text.strip(), "600")
        entries = {e.name: e for e in sb.list_files("/work/sub dir")}
        self.assertEqual(entries["blob.bin"].type, "file")
        self.assertEqual(entries["blob.bin"].size, len(blob))
        self.assertEqual(entries["blob.bin"].mode & 0o777, 0o600)
        self.assertIn("sub dir", {e.name: e.type for e in sb.list_files("/work")})
        with self.assertRaises(libdsec.NotFound):
            sb.read_file("/work/missing")

    def test_pause_resume(self):
        sb = self.create()
        self.assertEqual(sb.pause().state, "paused")
        with self.assertRaises(libdsec.Conflict):
            sb.exec(["true"])
        self.assertEqual(sb.resume().state, "running")
        sb.exec(["true"]).check()

    def test_context_manager_deletes(self):
        with self.client.create(tier="container", layers=[self.base]) as sb:
            _daemon["sandboxes"].append(sb.id)
            sb.exec(["true"]).check()
        with self.assertRaises(libdsec.NotFound):
            self.client.get(sb.id)

    def test_pack_diff_makes_a_usable_layer(self):
        sb = self.create()
        sb.write_file("/work/from-diff.txt", b"diff content\n")
        name = "sdkit-diff-" + secrets.token_hex(4)
        out = sb.pack_diff(name, "1")
        _daemon["layers"].append(out["layer"])
        self.addCleanup(self._remove_layer, out["layer"])
        self.assertEqual(out["layer"], name + ":1")
        self.assertTrue(out["digest"].startswith("sha256:"), out)
        sb2 = self.create(layers=[self.base, out["layer"]])
        self.assertEqual(sb2.read_file("/work/from-diff.txt"), b"diff content\n")
        with self.assertRaises(libdsec.Conflict):
            self.client.remove_layer(out["layer"])  # in use by sb2
        sb2.delete()

    def _remove_layer(self, ref):
        try:
            self.client.remove_layer(ref)
        except libdsec.NotFound:
            pass


class FncallTest(DaemonTest):
    def setUp(self):
        super().setUp()
        if not self.client.health()["tiers"].get("fncall"):
            self.skipTest("the daemon reports the fncall tier unavailable on this host")

    def test_fncall_bash_code_string(self):
        # The busybox layer has sh, not python3: lang="bash" runs there.
        sb = self.create(tier="fncall", lang="bash", layers=[self.base])
        self.assertEqual(sb.tier, "fncall")
        r = sb.exec('echo $((6 * 7)) "$1"; cat', args=["arg1"], stdin=b"in\x00put")
        self.assertEqual(r.check().stdout, b"42 arg1\nin\x00put")
        r = sb.exec("exit 5")
        self.assertEqual(r.exit_code, 5)
        with self.assertRaises(libdsec.Conflict):
            sb.read_file("/etc/passwd")

    def test_switching_tier_is_one_parameter(self):
        for tier in ("container", "fncall"):
            with self.subTest(tier=tier):
                sb = self.create(tier=tier, lang="bash" if tier == "fncall" else None,
                                 layers=[self.base])
                self.assertEqual(sb.tier, tier)
                cmd = "echo hi" if tier == "fncall" else ["sh", "-c", "echo hi"]
                self.assertEqual(sb.exec(cmd).check().stdout, b"hi\n")

    # python fncall end to end: test_integration_sdk.py (offline python layer).


class TrajectoryTest(DaemonTest):
    # A command whose output differs on every real run: a replayed result
    # equal to the recorded one proves the command was not run again.
    NONCE = ["sh", "-c", "cat /proc/sys/kernel/random/uuid | tee -a /work/ran"]

    def record(self, task):
        sb = self.create(task_id=task)
        self.assertEqual(sb.task_id, task)
        first = sb.exec(self.NONCE).check()
        second = sb.exec(["sh", "-c", "echo two; exit 4"])
        self.assertEqual((first.seq, second.seq), (0, 1))
        self.assertFalse(first.replayed)
        sb.delete()
        return first, second

    def test_log_then_resume_replays_then_goes_live(self):
        task = self.new_task()
        first, second = self.record(task)
        log = self.client.task_log(task)
        self.assertEqual([r["seq"] for r in log["records"]], [0, 1])
        self.assertEqual(log["records"][0]["argv"], self.NONCE)
        self.assertEqual(log["records"][1]["exit_code"], 4)

        sb = self.client.resume(task, tier="container", layers=[self.base])
        _daemon["sandboxes"].append(sb.id)
        self.addCleanup(self._delete, sb)
        self.assertEqual(sb.recorded, 2)
        r0 = sb.exec(self.NONCE)
        self.assertTrue(r0.replayed)
        self.assertEqual(r0.stdout, first.stdout)  # recorded output, not a new uuid
        r1 = sb.exec(["sh", "-c", "echo two; exit 4"])
        self.assertTrue(r1.replayed)
        self.assertEqual((r1.exit_code, r1.stdout), (4, b"two\n"))
        live = sb.exec(["sh", "-c", "cat /work/ran 2>/dev/null | wc -l"])
        self.assertFalse(live.replayed)
        self.assertIsNotNone(live.divergence)
        self.assertEqual(live.divergence.reason, "past-end")
        self.assertEqual(live.divergence.seq, 2)
        self.assertEqual(live.seq, 2)
        # The non-idempotent command was not run again in the new sandbox.
        self.assertEqual(live.check().text.strip(), "0")
        self.assertEqual(len(self.client.task_log(task)["records"]), 3)

    def test_resume_restores_files_from_the_last_pack_diff_checkpoint(self):
        task = self.new_task()
        sb = self.create(task_id=task)
        sb.exec(["sh", "-c", "echo one >> /work/state"]).check()
        diff = sb.pack_diff("sdkit-ck-" + secrets.token_hex(4), "1")
        _daemon["layers"].append(diff["layer"])
        sb.exec(["sh", "-c", "echo two >> /work/state"]).check()
        sb.delete()
        log = self.client.task_log(task)
        self.assertEqual(log["checkpoints"], [{"prefix": 1, "layer": diff["layer"]}])

        sb = self.client.resume(task, tier="container", layers=[self.base])
        _daemon["sandboxes"].append(sb.id)
        self.addCleanup(self._delete, sb)
        self.assertTrue(sb.exec(["sh", "-c", "echo one >> /work/state"]).replayed)
        self.assertTrue(sb.exec(["sh", "-c", "echo two >> /work/state"]).replayed)
        live = sb.exec(["cat", "/work/state"])
        self.assertFalse(live.replayed)
        self.assertEqual(live.divergence.reason, "past-end")
        # Files come back from the checkpoint (after exec 0); exec 1 was not
        # idempotent, so it is not re-run and is reported as not re-applied.
        self.assertEqual(live.check().stdout, b"one\n")
        self.assertEqual(live.divergence.not_reapplied, [1])

    def test_resume_reruns_idempotent_commands_after_the_checkpoint(self):
        task = self.new_task()
        sb = self.create(task_id=task)
        sb.exec(["sh", "-c", "echo one > /work/a"]).check()
        diff = sb.pack_diff("sdkit-ck-" + secrets.token_hex(4), "1")
        _daemon["layers"].append(diff["layer"])
        sb.exec(["sh", "-c", "echo two > /work/b"], idempotent=True).check()
        sb.delete()
        sb = self.client.resume(task, tier="container", layers=[self.base])
        _daemon["sandboxes"].append(sb.id)
        self.addCleanup(self._delete, sb)
        self.assertTrue(sb.exec(["sh", "-c", "echo one > /work/a"]).replayed)
        self.assertTrue(sb.exec(["sh", "-c", "echo two > /work/b"], idempotent=True).replayed)
        live = sb.exec(["cat", "/work/a", "/work/b"])
        self.assertEqual(live.check().stdout, b"one\ntwo\n")
        self.assertEqual(live.divergence.not_reapplied, [])

    def test_resume_divergence_on_a_different_command(self):
        task = self.new_task()
        self.record(task)
        sb = self.client.resume(task, tier="container", layers=[self.base])
        _daemon["sandboxes"].append(sb.id)
        self.addCleanup(self._delete, sb)
        r = sb.exec(["echo", "something else"])
        self.assertFalse(r.replayed)
        self.assertEqual(r.text, "something else\n")
        self.assertEqual(r.divergence.reason, "differs")
        self.assertEqual(r.divergence.seq, 0)
        self.assertIn("argv", r.divergence.fields)

    def test_delete_task(self):
        task = self.new_task()
        self.record(task)
        self.client.delete_task(task)
        with self.assertRaises(libdsec.NotFound):
            self.client.task_log(task)


if __name__ == "__main__":
    unittest.main()

# SPDX-License-Identifier: Apache-2.0
"""Integration tests: exec_stream while the command runs, and qos placement.

The same private daemon as test_integration_daemon.py (its module set-up is
reused); skips with the reason without $DSEC_VMMD, root, a static busybox or
mkfs.erofs.
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import libdsec  # noqa: E402
import test_integration_daemon as daemon  # noqa: E402

setUpModule = daemon.setUpModule
tearDownModule = daemon.tearDownModule


def cpu_list(cpus):
    """The kernel's list syntax for sorted CPUs, as cpuset files show it."""
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else "%d-%d" % (cpus[i], cpus[j]))
        i = j + 1
    return ",".join(out)


def read(path):
    with open(path) as f:
        return f.read()


def status_field(pid, field):
    for line in read("/proc/%d/status" % pid).splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


class _DaemonCase(unittest.TestCase):
    def setUp(self):
        if daemon._daemon is None:
            self.skipTest("daemon not started")
        self.client = daemon._daemon["client"]
        self.base = daemon._daemon["base"]

    def create(self, **kw):
        kw.setdefault("tier", "container")
        kw.setdefault("layers", [self.base])
        sb = self.client.create(**kw)
        daemon._daemon["sandboxes"].append(sb.id)
        self.addCleanup(self._delete, sb)
        return sb

    def _delete(self, sb):
        try:
            sb.delete()
        except libdsec.NotFound:
            pass


class StreamTest(_DaemonCase):
    def assert_streams_live(self, sb, cmd):
        start = time.monotonic()
        stream = sb.exec_stream(cmd)
        first = next(stream)
        t_first = time.monotonic()
        rest = list(stream)
        t_end = time.monotonic()
        self.assertEqual(first, ("stdout", b"first\n"))
        # The first line came well before the command's 2 s sleep ended.
        self.assertLess(t_first - start, 1.5)
        self.assertGreaterEqual(t_end - t_first, 1.5)
        self.assertEqual(b"".join(d for s, d in rest if s == "stdout"), b"second\n")
        self.assertEqual(stream.result.exit_code, 0)
        self.assertEqual(stream.result.stdout, b"first\nsecond\n")
        self.assertEqual(stream.deferred_bytes, 0)

    def test_container_output_arrives_while_the_command_runs(self):
        sb = self.create()
        self.assert_streams_live(sb, ["sh", "-c", "echo first; sleep 2; echo second"])

    def test_fncall_output_arrives_while_the_call_runs(self):
        if not self.client.health()["tiers"].get("fncall"):
            self.skipTest("the daemon reports the fncall tier unavailable on this host")
        sb = self.create(tier="fncall", lang="bash")
        self.assert_streams_live(sb, "echo first; sleep 2; echo second")

    def test_yes_flood_is_capped_and_the_exec_returns(self):
        sb = self.create()
        stream = sb.exec_stream(["sh", "-c", "yes | head -c 20000000"], timeout_s=60)
        total = sum(len(d) for s, d in stream)
        r = stream.result
        self.assertEqual(r.exit_code, 0)
        self.assertGreater(r.stdout_dropped, 0)
        self.assertEqual(total, len(r.stdout))
        self.assertEqual(total + r.stdout_dropped, 20000000)
        self.assertLessEqual(total, 4 << 20)

    def test_slow_reader_gets_everything_late(self):
        sb = self.create()
        stream = sb.exec_stream(["sh", "-c", "echo go; yes | head -c 3000000; touch /tmp/end"])
        name, first = next(stream)  # "go\n", perhaps with the first y's
        self.assertEqual((name, first[:3]), ("stdout", b"go\n"))
        # Not reading: a second exec on the sandbox sees the streamed
        # command finish all its output, so it did not wait for this reader.
        after = sb.exec(["sh", "-c", "while [ ! -e /tmp/end ]; do sleep 0.01; done; echo after"])
        self.assertEqual(after.stdout, b"after\n")
        rest = b"".join(d for s, d in stream)
        self.assertEqual(len(first) + len(rest), 3 + 3000000)
        self.assertEqual(stream.result.stdout, first + rest)
        self.assertGreater(stream.deferred_bytes, 0)

    def test_client_disconnect_leaves_daemon_and_sandbox_usable(self):
        sb = self.create()
        stream = sb.exec_stream(["sh", "-c", "echo one; sleep 1; yes | head -c 5000000; echo two"])
        self.assertEqual(next(stream), ("stdout", b"one\n"))
        stream.close()  # drops the connection mid-stream
        self.assertEqual(self.client.health()["status"], "ok")
        self.assertEqual(sb.exec(["echo", "ok"]).stdout, b"ok\n")
        # The dropped stream's command runs beside that exec to its end,
        # and its exec then ends too: nothing is left running.
        deadline = time.monotonic() + 30
        while "dsec_execs_running 0" not in self.client.metrics() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("dsec_execs_running 0", self.client.metrics())


class QosTest(_DaemonCase):
    def test_ls_and_be_run_in_their_placed_cpusets(self):
        if not self.client.health().get("qos", {}).get("available"):
            self.skipTest("no QoS placement on this host: %s" % self.client.health().get("qos"))
        ls = self.create(qos="ls")
        be = self.create(qos="be")
        for sb in (ls, be):
            self.assertTrue(sb.qos_applied, sb.qos_reason)
            self.assertEqual(sb.placement["qos"], sb.qos)
        if os.cpu_count() >= 2:
            self.assertFalse(set(ls.placement["cpus"]) & set(be.placement["cpus"]))
        cgroups = []
        for sb in (ls, be):
            cg, cpus = sb.placement["cgroup"], cpu_list(sb.placement["cpus"])
            cgroups.append(cg)
            self.assertEqual(read(cg + "/cpuset.cpus").strip(), cpus)
            stream = sb.exec_stream(["sh", "-c", "echo marker-%s; sleep 2; true" % sb.qos])
            self.assertEqual(next(stream)[1], ("marker-%s\n" % sb.qos).encode())
            # The command is running: find it from the host.
            pids = [int(p) for p in read(cg + "/cgroup.procs").split()]
            mine = [p for p in pids
                    if b"marker-" in open("/proc/%d/cmdline" % p, "rb").read()]
            self.assertTrue(mine, "exec process not in %s (%s)" % (cg, pids))
            for p in mine:
                lines = read("/proc/%d/cgroup" % p).splitlines()
                self.assertTrue(any(":cpuset:" in line and line.endswith("/" + os.path.basename(cg))
                                    for line in lines), lines)
                self.assertEqual(status_field(p, "Cpus_allowed_list"), cpus)
            stream.wait()
        metrics = self.client.metrics()
        self.assertIn('dsec_sandboxes_qos{qos="ls",applied="true"} 1', metrics)
        self.assertIn('dsec_sandboxes_qos{qos="be",applied="true"} 1', metrics)
        ls.delete()
        be.delete()
        for cg in cgroups:
            self.assertFalse(os.path.exists(cg), cg)

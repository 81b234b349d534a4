# SPDX-License-Identifier: Apache-2.0
"""The trajectory log under kill -9 of the daemon, through libdsec.

Each round: a client thread runs numbered execs with a task_id (each appends
its number to /work/ran and prints a fresh uuid), with a pack_diff
checkpoint after the third; the daemon is SIGKILLed at a random moment,
then restarted on the same directories. Checked: every acknowledged exec is
in the log with its output; after Task.resume, sending the commands again
replays every recorded one (same uuid: not run again) and /work/ran holds
exactly the lines of the checkpoint (plus the in-flight command when it was
not recorded and so ran live): no replayed command executed twice; nothing
is left on the host.
"""

import base64
import os
import random
import secrets
import threading

import pytest

import harness
import libdsec
from conftest import require_daemon

ROUNDS = 3
CHECKPOINT_AFTER = 3  # execs before the pack_diff checkpoint


def _cmd(i):
    return ["sh", "-c", "echo %d >> /work/ran; cat /proc/sys/kernel/random/uuid" % i]


class Worker(threading.Thread):
    def __init__(self, socket, task_id, base):
        super().__init__(daemon=True)
        self.socket, self.task_id, self.base = socket, task_id, base
        self.acked = []          # (seq, stdout) of acknowledged execs, in order
        self.in_flight = None    # the command number sent when the daemon died
        self.checkpoint = None   # the acknowledged pack_diff answer
        self.sandbox_id = None
        self.error = None        # anything but the expected transport failure
        self.first_ack = threading.Event()

    def run(self):
        client = libdsec.Client(socket_path=self.socket, timeout=60)
        try:
            sb = libdsec.Sandbox(tier="container", layers=[self.base], task_id=self.task_id,
                                 client=client)
            self.sandbox_id = sb.id
            i = 0
            while True:
                self.in_flight = i
                r = sb.exec(_cmd(i))
                if r.exit_code != 0 or r.seq != i:
                    raise AssertionError("exec %d: exit %s seq %s" % (i, r.exit_code, r.seq))
                self.acked.append((r.seq, r.stdout))
                self.in_flight = None
                self.first_ack.set()
                i += 1
                if i == CHECKPOINT_AFTER:
                    self.checkpoint = sb.pack_diff("sdkpy-ck-" + secrets.token_hex(4))
        except libdsec.TransportError:
            pass  # the daemon was killed: expected
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.first_ack.set()
            client.close()


@pytest.fixture
def crash_daemon(private_tmp):
    require_daemon()
    d = harness.Daemon(private_tmp)
    d.start()
    c = d.client(timeout=300)
    tree = os.path.join(private_tmp, "busybox-tree")
    harness.build_busybox_tree(tree)
    name = "sdkpy-crash-bb-" + secrets.token_hex(4)
    c.build_layer(name, "1", tree)
    c.close()
    d.base = name + ":1"
    d.created = set()
    yield d
    d.stop()
    leaks = d.leaks(d.created)
    assert not leaks, "left behind: %r" % leaks


def test_kill9_loses_no_acknowledged_record_and_replays_without_rerunning(crash_daemon):
    d = crash_daemon
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print("random seed", seed)
    for rnd in range(ROUNDS):
        task_id = "sdkpy-crash-%d-%s" % (rnd, secrets.token_hex(4))
        w = Worker(d.socket, task_id, d.base)
        w.start()
        assert w.first_ack.wait(60), "no exec acknowledged within 60 s"
        threading.Event().wait(rng.uniform(0.0, 1.2))  # the random kill point
        d.kill9()
        w.join(60)
        assert not w.is_alive()
        assert w.error is None, "round %d: %r" % (rnd, w.error)
        if w.sandbox_id:
            d.created.add(w.sandbox_id)
        health = d.start()
        print("round %d: %d acked, in flight %s, checkpoint %s, recovered %s" % (
            rnd, len(w.acked), w.in_flight, bool(w.checkpoint), health.get("recovered")))
        # The killed sandbox is gone from the host and the registry.
        assert d.leaks([w.sandbox_id]) == {}
        task = libdsec.Task(task_id, socket=d.socket)
        try:
            log = task.log()
            recs = log["records"]
            by_seq = {r["seq"]: base64.b64decode(r.get("stdout_b64") or "") for r in recs}
            # No acknowledged record lost, output intact; at most the in-flight one more.
            for seq, out in w.acked:
                assert by_seq.get(seq) == out, "round %d: acked seq %d lost or changed" % (rnd, seq)
            assert len(recs) - len(w.acked) in (0, 1), (len(recs), len(w.acked))
            assert sorted(by_seq) == list(range(len(recs)))
            if w.checkpoint:
                assert {"prefix": CHECKPOINT_AFTER, "layer": w.checkpoint["layer"]} in log["checkpoints"]
            prefix = max([c["prefix"] for c in log["checkpoints"]], default=0)

            resend = len(w.acked) + (1 if w.in_flight is not None else 0)
            with task.resume(tier="container", layers=[d.base]) as sb:
                d.created.add(sb.id)
                assert sb.recorded == len(recs)
                ran_live = []
                for i in range(resend):
                    r = sb.exec(_cmd(i))
                    if i < len(recs):
                        assert r.replayed and r.stdout == by_seq[i], "round %d seq %d re-ran" % (rnd, i)
                    else:
                        assert not r.replayed and r.divergence.reason == "past-end"
                        ran_live.append(i)
                live = sb.exec(["cat", "/work/ran"])
                assert not live.replayed
                # Files: the checkpoint's lines, then only what ran live here.
                expected = "".join("%d\n" % i for i in list(range(prefix)) + ran_live)
                assert live.stdout.decode() == expected, (rnd, prefix, ran_live, live.stdout)
        finally:
            try:
                task.delete()
            except libdsec.NotFound:
                pass
            if w.checkpoint:
                try:
                    task.client.remove_layer(w.checkpoint["layer"])
                except libdsec.DsecError:
                    pass
            task.close()

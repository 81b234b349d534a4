#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The density benchmark behind `dsec-vmm bench density`: idle sandboxes of
one tier created through libdsec by one client, up to --max or until the
node refuses, with at each step (--steps) the create latency, execs in a
sample of the live sandboxes, the deletes of create+delete probes, and host
memory per sandbox; then everything deleted by --delete-concurrency clients.

It needs a running daemon (--socket), its pid (--daemon-pid: its memory
cgroup, fds and RSS) and, for the container tier, its state directory
(--container-state-dir: the cgroups of sandboxes made on a made-ahead init).
Layers are built as api_bench.py builds them (its Setup). Everything it
creates is deleted at the end, also on an error or Ctrl-C.

usage: density_bench.py --socket PATH --work DIR --daemon-pid PID [--tier T]
                        [--max N] [--steps LIST] [--sample K]
                        [--delete-concurrency C] [--container-state-dir DIR]
                        [--ksm on|off|both] [--json]
"""

import argparse
import collections
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # api_bench
sys.path.insert(0, os.path.dirname(HERE))  # sdk/python: libdsec

import libdsec  # noqa: E402
from api_bench import Setup, percentile, wait_health  # noqa: E402

DEFAULT_STEPS = (10, 100, 1000, 10000)
KSM_DIR = "/sys/kernel/mm/ksm"
EXPECTED = b"hi\n"


# -- pure parts (sdk/python/tests/test_unit_density_bench.py) -----------------

def parse_steps(text, max_n):
    """The densities to measure at, ascending and distinct; the ramp ends at
    the last. `text` ("10,100") each capped at max_n, or when empty
    DEFAULT_STEPS below max_n, then max_n. ValueError on a bad list."""
    if max_n < 1:
        raise ValueError("--max must be positive")
    if text.strip():
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            raise ValueError("--steps wants positive numbers separated by commas, not %r" % text)
        if any(v < 1 for v in values):
            raise ValueError("--steps wants positive numbers, not %r" % text)
    else:
        values = [v for v in DEFAULT_STEPS if v < max_n] + [max_n]
    return sorted({min(v, max_n) for v in values})


def sample_indices(n, k):
    """k of n indices in creation order: the oldest, the newest and evenly
    spaced between them (all n when n <= k)."""
    if n <= k:
        return list(range(n))
    if k == 1:
        return [n - 1]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def pct(values, p):
    """api_bench.percentile (nearest rank), rounded; None for no samples."""
    return round(percentile(values, p), 2) if values else None


def parse_meminfo(text):
    """/proc/meminfo as {name: KiB}."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[name] = int(fields[0])
    return out


def _unescape(field):
    """A mountinfo path field (\\040 is a blank, \\134 a backslash ...)."""
    out, i = "", 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out += chr(int(field[i + 1:i + 4], 8))
            i += 4
        else:
            out += field[i]
            i += 1
    return out


def memory_cgroup_dir(proc_cgroup, mountinfo):
    """Where a process's memory cgroup is, from its /proc/PID/cgroup and a
    /proc/PID/mountinfo: (directory, usage file) — memory.usage_in_bytes on
    a v1 memory hierarchy, memory.current on cgroup v2 — or (None, why)."""
    mounts = {}  # v1 controller (or "" for cgroup2) -> (root, mount point)
    for line in mountinfo.splitlines():
        pre, sep, post = line.partition(" - ")
        f, p = pre.split(), post.split()
        if not sep or len(f) < 5 or len(p) < 3:
            continue
        keys = p[2].split(",") if p[0] == "cgroup" else [""] if p[0] == "cgroup2" else []
        for k in keys:
            mounts.setdefault(k, (_unescape(f[3]), _unescape(f[4])))

    def place(key, path):
        root, mnt = mounts[key]
        if root != "/" and (path == root or path.startswith(root + "/")):
            path = path[len(root):]
        return os.path.join(mnt, path.lstrip("/")).rstrip("/")

    v2 = None
    for line in proc_cgroup.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            if "memory" not in mounts:
                return None, "the v1 memory hierarchy is not mounted here"
            return place("memory", path), "memory.usage_in_bytes"
    if v2 is not None and "" in mounts:
        return place("", v2), "memory.current"
    return None, ("the daemon is in no memory cgroup (no memory line in /proc/PID/cgroup, "
                  "no cgroup2)")


# -- host readings ---------------------------------------------------------------

def read_text(path):
    with open(path) as f:
        return f.read()


def read_meminfo():
    """/proc/meminfo after folding the per-CPU vm counters into the totals
    (a write to /proc/sys/vm/stat_refresh, root only): else they lag by up
    to vm.stat_interval (1 s), longer than a fast step takes."""
    try:
        with open("/proc/sys/vm/stat_refresh", "w") as f:
            f.write("1")
    except OSError:
        pass  # EINVAL reports a negative total, the fold happened; not root: as it is
    return parse_meminfo(read_text("/proc/meminfo"))


def daemon_stats(pid):
    """(open fds, VmRSS KiB) of the daemon."""
    fds = len(os.listdir("/proc/%d/fd" % pid))
    rss = parse_meminfo(read_text("/proc/%d/status" % pid)).get("VmRSS")
    return fds, rss


class Memcg:
    """The memory cgroups of the tier's sandboxes, below the daemon's own:
    container dsec-ctr-<id> (or, for a sandbox made on a made-ahead init,
    the memory directory its state directory records), microvm
    dsec-ctr-mvm-<id>, fncall the shared pools' workers dsec-ctr-d<pid>-*."""

    def __init__(self, tier, daemon_pid, container_state_dir, base, file):
        """base, file: memory_cgroup_dir's answer for the daemon (None, why)."""
        self.tier, self.pid, self.state_dir = tier, daemon_pid, container_state_dir
        self.base, self.file = base, file

    @classmethod
    def of_daemon(cls, tier, daemon_pid, container_state_dir):
        try:
            where = memory_cgroup_dir(read_text("/proc/%d/cgroup" % daemon_pid),
                                      read_text("/proc/%d/mountinfo" % daemon_pid))
        except OSError as e:
            where = None, "cannot read the daemon's cgroups: %s" % e
        return cls(tier, daemon_pid, container_state_dir, *where)

    def _usage(self, d):
        try:
            return int(read_text(os.path.join(d, self.file)))
        except (OSError, ValueError):
            return None

    def _recorded(self, sandbox_id):
        """The memory cgroup the container state directory records."""
        try:
            lines = read_text(os.path.join(self.state_dir, sandbox_id, "cgroups")).split()
        except (OSError, TypeError):
            return None
        for d in lines:
            if d.startswith(self.base + "/") and self._usage(d) is not None:
                return d
        return None

    def measure(self, ids):
        """{"kib_per_sandbox", "found", "how"} or {"kib_per_sandbox": None, "why"}."""
        if self.base is None:
            return {"kib_per_sandbox": None, "why": self.file}
        if not ids:
            return {"kib_per_sandbox": None, "why": "no live sandbox"}
        total, found, recorded = 0, 0, 0
        if self.tier == "fncall":
            prefix = "dsec-ctr-d%d-" % self.pid
            try:
                dirs = [os.path.join(self.base, e) for e in os.listdir(self.base)
                        if e.startswith(prefix)]
            except OSError as e:
                return {"kib_per_sandbox": None, "why": "cannot list %s: %s" % (self.base, e)}
            for d in dirs:
                u = self._usage(d)
                if u is not None:
                    total, found = total + u, found + 1
            if not found:
                return {"kib_per_sandbox": None,
                        "why": "no pool worker cgroup %s*/%s below %s at this moment"
                               % (prefix, self.file, self.base)}
            return {"kib_per_sandbox": round(total / 1024 / len(ids), 1), "found": found,
                    "how": "%d pool worker cgroups (%s*) shared by %d sandboxes"
                           % (found, prefix, len(ids))}
        name = "dsec-ctr-mvm-%s" if self.tier == "microvm" else "dsec-ctr-%s"
        dirs = []
        for sid in ids:
            d = os.path.join(self.base, name % sid)
            u = self._usage(d)
            if u is None and self.tier == "container":
                d = self._recorded(sid)
                u = self._usage(d) if d else None
                recorded += u is not None
            if u is not None:
                total, found = total + u, found + 1
                dirs.append(d)
        if not found:
            return {"kib_per_sandbox": None,
                    "why": "no %s/%s below %s" % (name % "<id>", self.file, self.base)}
        how = "%d of %d sandboxes' cgroups (%s" % (found, len(ids), name % "<id>")
        how += ", %d from the state directory's record)" % recorded if recorded else ")"
        return {"kib_per_sandbox": round(total / 1024 / found, 1), "found": found, "how": how,
                "dirs": dirs}


class Ksm:
    """KSM's global switch (/sys/kernel/mm/ksm/run): saved when made,
    restored by restore()."""

    def __init__(self, root=KSM_DIR):
        self.root = root
        try:
            self.saved = read_text(os.path.join(root, "run")).strip()
        except OSError:
            self.saved = None

    def set(self, on):
        with open(os.path.join(self.root, "run"), "w") as f:
            f.write("1" if on else "0")  # 0 stops merging; 2 would unmerge the whole host's pages

    def sharing_kib(self):
        try:
            pages = int(read_text(os.path.join(self.root, "pages_sharing")))
            return pages * os.sysconf("SC_PAGE_SIZE") // 1024
        except (OSError, ValueError):
            return None

    def restore(self):
        if self.saved is not None:
            with open(os.path.join(self.root, "run"), "w") as f:
                f.write(self.saved)


# -- the ramp ----------------------------------------------------------------------

class Run:
    """One ramp: what it made (deleted by cleanup()) and its figures."""

    def __init__(self, a, client, kw, cmd, memcg, ksm, ksm_mode, log):
        self.a, self.client, self.kw, self.cmd = a, client, kw, cmd
        self.memcg, self.ksm, self.log = memcg, ksm, log
        self.live = []          # handles in creation order
        self.cgroup_dirs = []   # the live sandboxes' memory cgroups at the last step
        self.undeleted = set()  # ids created and not deleted (ramp and probes)
        self.result = {"ksm": ksm_mode, "steps": [], "stop": None, "delete_all": None}

    def create(self):
        h = self.client.create(**self.kw)
        self.undeleted.add(h.id)
        return h

    def ramp(self, steps):
        before = read_meminfo()
        stop = None
        for target in steps:
            creates = []
            while len(self.live) < target:
                t0 = time.perf_counter()
                try:
                    h = self.create()
                except libdsec.ResourceExhausted as e:
                    stop = {"reason": "refused", "status": e.status, "message": e.message}
                    break
                except libdsec.DsecError as e:
                    stop = {"reason": "error", "message": str(e)}
                    break
                creates.append((time.perf_counter() - t0) * 1e3)
                self.live.append(h)
            done = self.result["steps"]
            if self.live and (not done or done[-1]["live"] < len(self.live)):
                done.append(self.measure(target, creates, before))
                self.log("%d live" % len(self.live))
            if stop:
                break
        if stop is None:
            stop = {"reason": "max", "message": "reached %d" % steps[-1]}
        stop["live"] = len(self.live)
        self.result["stop"] = stop
        self.result["delete_all"] = self.delete_all()

    def measure(self, target, creates, before):
        n = len(self.live)
        # Memory first, while every sandbox has only idled.
        now = read_meminfo()
        fds, rss = daemon_stats(self.a.daemon_pid)
        mc = self.memcg.measure([h.id for h in self.live])
        self.cgroup_dirs = mc.pop("dirs", [])
        s = {"target": target, "live": n, "creates": len(creates),
             "create_p50_ms": pct(creates, 50), "create_p99_ms": pct(creates, 99),
             "memavail_kib_per_sandbox":
                 round((before["MemAvailable"] - now["MemAvailable"]) / n, 1),
             "memcg_kib_per_sandbox": mc["kib_per_sandbox"],
             "memcg": mc.get("how") or mc.get("why"),
             "sunreclaim_kib_per_sandbox": round((now["SUnreclaim"] - before["SUnreclaim"]) / n, 1),
             "slab_kib_per_sandbox": round((now["Slab"] - before["Slab"]) / n, 1),
             "daemon_fds": fds, "daemon_rss_kib": rss}
        if self.result["ksm"] is not None:
            s["ksm_sharing_kib"] = self.ksm.sharing_kib()
        execs, failures = [], []
        for i in sample_indices(n, self.a.sample):
            h = self.live[i]
            t0 = time.perf_counter()
            try:
                r = h.exec(self.cmd)
            except libdsec.DsecError as e:
                failures.append("%s (#%d): %s" % (h.id, i + 1, e))
                continue
            ms = (time.perf_counter() - t0) * 1e3
            if r.exit_code != 0 or r.stdout != EXPECTED:
                failures.append("%s (#%d): exit %s, stdout %r, stderr %r"
                                % (h.id, i + 1, r.exit_code, r.stdout[:100], r.stderr[-200:]))
            else:
                execs.append(ms)
        s.update({"execs": len(execs), "exec_p50_ms": pct(execs, 50), "exec_p99_ms": pct(execs, 99),
                  "exec_failures": len(failures),
                  "exec_failure": failures[0] if failures else None})
        deletes, probe_stop = [], None
        for _ in range(self.a.sample):
            try:
                h = self.create()
            except libdsec.DsecError as e:
                probe_stop = "probe create: %s" % e
                break
            t0 = time.perf_counter()
            try:
                h.delete()
            except libdsec.DsecError as e:
                probe_stop = "probe delete: %s" % e
                break
            deletes.append((time.perf_counter() - t0) * 1e3)
            self.undeleted.discard(h.id)
        s.update({"deletes": len(deletes), "delete_p50_ms": pct(deletes, 50),
                  "delete_p99_ms": pct(deletes, 99), "probe_stop": probe_stop})
        return s

    def delete_all(self):
        """Deletes the ramp's sandboxes with --delete-concurrency clients."""
        queue = collections.deque(h.id for h in self.live)
        times, errors = [], []

        def deleter():
            c = libdsec.Client(socket_path=self.a.socket, timeout=300)
            try:
                while True:
                    try:
                        sid = queue.popleft()
                    except IndexError:
                        return
                    t0 = time.perf_counter()
                    try:
                        c.delete(sid)
                    except libdsec.DsecError as e:
                        errors.append("%s: %s" % (sid, e))
                        continue
                    times.append((time.perf_counter() - t0) * 1e3)
                    self.undeleted.discard(sid)
            finally:
                c.close()

        n = len(queue)
        t0 = time.monotonic()
        threads = [threading.Thread(target=deleter, daemon=True)
                   for _ in range(self.a.delete_concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = round(time.monotonic() - t0, 3)
        self.live = []
        return {"sandboxes": n, "seconds": seconds, "cgroups_gone_s": self.cgroups_gone(t0),
                "clients": self.a.delete_concurrency,
                "p50_ms": pct(times, 50), "p99_ms": pct(times, 99),
                "errors": len(errors), "error": errors[0] if errors else None}

    def cgroups_gone(self, t0, seconds=60):
        """Seconds from t0 until the memory cgroups of the last step's
        sandboxes are gone (the daemon removes a deleted sandbox's cgroups
        after its delete has answered); None when none were found or past
        the deadline."""
        deadline = time.monotonic() + seconds
        while any(os.path.isdir(d) for d in self.cgroup_dirs):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)  # polls a condition, bounded by the deadline
        return round(time.monotonic() - t0, 3) if self.cgroup_dirs else None

    def cleanup(self):
        """Deletes whatever is left (an error or Ctrl-C midway), also a
        sandbox whose create was in flight when Ctrl-C came: it carries this
        run's layers (a name of its own, api_bench.Setup)."""
        try:
            layers = list(self.kw.get("layers") or [])
            self.undeleted.update(s.id for s in self.client.list() if layers and s.layers == layers)
        except libdsec.DsecError as e:
            self.log("cleanup: cannot list the sandboxes: %s" % e)
        left = list(self.undeleted)
        if left:
            self.log("deleting the %d sandboxes left" % len(left))
        for sid in left:
            try:
                self.client.delete(sid)
            except libdsec.NotFound:
                pass
            except libdsec.DsecError as e:
                self.log("cleanup: %s: %s" % (sid, e))
            self.undeleted.discard(sid)


# -- report --------------------------------------------------------------------------

def _f(v, width, digits=1):
    return ("%*.*f" % (width, digits, v)) if isinstance(v, (int, float)) else "%*s" % (width, "-")


def stop_text(stop):
    if stop is None:
        return "not finished"
    if stop["reason"] == "max":
        return "%s (%d live)" % (stop["message"], stop["live"])
    if stop["reason"] == "refused":
        return "the node refused at %d live (HTTP %s): %s" % (stop["live"], stop.get("status"),
                                                              stop["message"])
    return "%s at %d live: %s" % (stop["reason"], stop["live"], stop["message"])


# The table's columns: (step key, heading, second heading, width, digits).
COLUMNS = (("live", "live", "", 6, 0),
           ("create_p50_ms", "create", "p50 ms", 8, 2), ("create_p99_ms", "p99", "ms", 8, 2),
           ("exec_p50_ms", "exec", "p50 ms", 7, 2), ("exec_p99_ms", "p99", "ms", 7, 2),
           ("delete_p50_ms", "delete", "p50 ms", 7, 2), ("delete_p99_ms", "p99", "ms", 7, 2),
           ("memavail_kib_per_sandbox", "avail", "KiB/sb", 9, 1),
           ("memcg_kib_per_sandbox", "memcg", "KiB/sb", 9, 1),
           ("sunreclaim_kib_per_sandbox", "SUnrecl", "KiB/sb", 9, 1),
           ("daemon_fds", "fds", "daemon", 6, 0), ("daemon_rss_mib", "RSS", "MiB", 8, 1))


def print_run(r):
    if r["ksm"] is not None:
        print("KSM %s" % r["ksm"])
    for row in (1, 2):
        print(" ".join("%*s" % (c[3], c[row]) for c in COLUMNS))
    for s in r["steps"]:
        rss = s["daemon_rss_kib"]
        s = dict(s, daemon_rss_mib=rss / 1024 if rss is not None else None)
        print(" ".join(_f(s[c[0]], c[3], c[4]) for c in COLUMNS))
    for s in r["steps"]:
        notes = ["memcg: %s" % s["memcg"]]
        if s["exec_failures"]:
            notes.append("%d execs FAILED, e.g. %s" % (s["exec_failures"], s["exec_failure"]))
        if s["probe_stop"]:
            notes.append("probes stopped after %d: %s" % (s["deletes"], s["probe_stop"]))
        if "ksm_sharing_kib" in s:
            notes.append("KSM pages_sharing %s KiB" % s["ksm_sharing_kib"])
        print("  at %d: %s" % (s["live"], "; ".join(notes)))
    print("stop: %s" % stop_text(r["stop"]))
    d = r["delete_all"]
    if d:
        gone = d["cgroups_gone_s"]
        print("delete all: %d in %.2f s with %d clients, per delete p50 %s ms p99 %s ms%s%s"
              % (d["sandboxes"], d["seconds"], d["clients"], d["p50_ms"], d["p99_ms"],
                 "; their cgroups gone after %.2f s" % gone if gone is not None else "",
                 "; %d FAILED, e.g. %s" % (d["errors"], d["error"]) if d["errors"] else ""))


def failed(r):
    d = r["delete_all"]
    return (r["stop"] is None or r["stop"]["reason"] == "error" or not d or d["errors"] > 0
            or any(s["exec_failures"] for s in r["steps"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True, help="scratch directory (layer trees)")
    ap.add_argument("--daemon-pid", type=int, required=True)
    ap.add_argument("--container-state-dir")
    ap.add_argument("--tier", default="container", choices=("container", "fncall", "microvm"))
    ap.add_argument("--max", type=int, default=1000)
    ap.add_argument("--steps", default="")
    ap.add_argument("--sample", type=int, default=20)
    ap.add_argument("--delete-concurrency", type=int, default=4)
    ap.add_argument("--ksm", choices=("on", "off", "both"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        steps = parse_steps(a.steps, a.max)
    except ValueError as e:
        ap.error(str(e))
    if a.sample < 1 or a.delete_concurrency < 1:
        ap.error("--sample and --delete-concurrency must be positive")
    if a.ksm and a.tier != "microvm":
        ap.error("--ksm is for --tier microvm")
    log = lambda m: print("bench density: " + m, file=sys.stderr, flush=True)
    health = wait_health(a.socket)
    if not health.get("tiers", {}).get(a.tier):
        why = ((health.get("tiers_unavailable") or {}).get(a.tier)
               or "health: %s" % health.get("tiers"))
        log("the daemon does not offer the %s tier: %s" % (a.tier, why))
        return 2
    ksm = Ksm()
    modes = [None]
    if a.ksm and ksm.saved is None:
        log("KSM is absent (no %s/run): the ramp runs once, with the host as it is" % KSM_DIR)
    elif a.ksm:
        modes = ["off", "on"] if a.ksm == "both" else [a.ksm]
    log("daemon %s, %s tier, steps %s, sample %d" % (health.get("version"), a.tier,
                                                   ", ".join(map(str, steps)), a.sample))
    client = libdsec.Client(socket_path=a.socket, timeout=300)
    setup = Setup(client, a.work, log)
    memcg = Memcg.of_daemon(a.tier, a.daemon_pid, a.container_state_dir)
    runs, interrupted = [], False
    try:
        setup.build(["fncall"] if a.tier == "fncall" else ["container"])
        kw, cmd = setup.spec["fncall" if a.tier == "fncall" else "container"]
        if a.tier == "microvm":
            kw = dict(kw, tier="microvm")
        for mode in modes:
            if mode is not None:
                ksm.set(mode == "on")
            run = Run(a, client, kw, cmd, memcg, ksm, mode, log)
            runs.append(run.result)
            try:
                run.ramp(steps)
            except (libdsec.DsecError, OSError) as e:  # reported as the stop reason
                run.result["stop"] = {"reason": "error", "live": len(run.live), "message": str(e)}
            except KeyboardInterrupt:
                run.result["stop"] = {"reason": "interrupted", "live": len(run.live),
                                      "message": "SIGINT"}
                raise
            finally:
                run.cleanup()
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted; what it made is deleted")
    finally:
        try:
            ksm.restore()
        finally:
            setup.cleanup()
            client.close()
    for r in runs:
        if r["stop"] is None:
            r["stop"] = {"reason": "interrupted" if interrupted else "error", "live": 0,
                         "message": "before the ramp finished"}
    top = {"tier": a.tier, "max": a.max, "steps_wanted": steps, "sample": a.sample,
           "delete_concurrency": a.delete_concurrency}
    if a.json:
        if len(runs) == 1:
            top.update(runs[0])
        else:
            top["runs"] = runs
        print(json.dumps(top, indent=2))
    else:
        print("%s tier through libdsec, one client ramping to %s; %d execs and %d create+delete "
              "probes per step; memory per live sandbox"
              % (a.tier, ", ".join(map(str, steps)), a.sample, a.sample))
        for r in runs:
            print_run(r)
    if interrupted:
        return 130
    return 1 if not runs or any(failed(r) for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

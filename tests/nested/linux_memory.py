#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Host memory of Linux guests under dsec-vmm, measured inside L1 of the
nested bed (where a Linux guest boots under our monitor). Four figures of
issue 17, each printed as a table and one JSON line:

  pmem-density  N guests read every byte of one shared layer file, through
                virtio-pmem with DAX (the guest reads the host's page cache)
                and then through virtio-blk (into each guest's page cache).
                Figure: peak host memory of all N monitors together
                (memory.peak of a cgroup v2 made for the round; the layer's
                host page cache, dropped before each round, is charged
                there by its first reader), and the reduction pmem-DAX
                gives.
  fpr           One guest with a virtio-balloon fills a tmpfs, then frees it;
                Linux's free page reporting hands the freed pages back and
                the monitor releases them. Figure: the share of what the
                guest freed that is back on the host within 5 s (guest RAM
                resident in the monitor, from /proc/PID/smaps).
  reclaim       One guest per mode (vm run --reclaim off/balloon/...) fills
                its page cache from a virtio-blk layer, then idles. Figure:
                guest RAM resident over the following --watch-s seconds
                (time-integrated, GiB x s) and its reduction against off:
                the reclaim controller inflating the balloon makes Linux
                drop that cache.
  idle          N guests booted to the agent, idle. Figures per VM: guest
                RAM resident, monitor overhead (proportional set size minus
                guest RAM and minus the layers' shared page cache), all host
                memory (PSS), and microVMs per GiB.

The guests are the tier's own: the root image from tools/build-guest-image.sh
(dsec-agent as /sbin/init) on pmem0 with DAX, a busybox layer (plus the data
file) on pmem1 or, for the blk round, on /dev/vda, a tmpfs upper, a
`dsec.run` command on the console.

    tests/nested/bed.py run --mem 8192 -- python3 tests/nested/linux_memory.py \\
        --vmm build/dsec-vmm --agent build/guest-kernel/agent/dsec-agent \\
        --source . pmem-density --vms 8 --image-mib 256

Absolute times mean nothing under the bed's emulation; memory figures do
(they count pages, not time). Exit: 0 done, 1 a guest failed, 77 skip.
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import linux_guest

MIB = 1 << 20
BASE_CMDLINE = ("console=ttyS0 quiet root=/dev/pmem0 rootfstype=erofs ro rootwait rootflags=dax=always "
                "dsec.upper=tmpfs:64 ")
APPLETS = linux_guest.APPLETS + ("sleep", "wc", "dd", "rm", "free", "sync")


class Skip(Exception):
    pass


# --- host-side accounting ----------------------------------------------------


def cgroup2_root():
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return parts[1]
    return None


class Cgroup:
    """A cgroup v2 directory with the memory controller, removed on close."""

    def __init__(self, name):
        root = cgroup2_root()
        if root is None:
            raise Skip("no cgroup v2 hierarchy mounted (/proc/self/mounts)")
        with open(os.path.join(root, "cgroup.controllers")) as f:
            if "memory" not in f.read().split():
                raise Skip("the cgroup v2 hierarchy at %s has no memory controller" % root)
        with open(os.path.join(root, "cgroup.subtree_control")) as f:
            enabled = f.read().split()
        if "memory" not in enabled:
            with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
                f.write("+memory")
        self.path = os.path.join(root, "%s-%d" % (name, os.getpid()))
        os.mkdir(self.path)

    def join_fn(self):
        procs = os.path.join(self.path, "cgroup.procs")

        def join():
            with open(procs, "w") as f:
                f.write("0")
        return join

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def close(self):
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)  # a killed monitor is still being reaped; no event to wait on


def smaps(pid):
    """[(path, {field: kiB})] of a process's mappings."""
    out, cur = [], None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0].endswith(":") and len(parts) >= 2 and parts[-1] == "kB":
                cur[1][parts[0][:-1]] = int(parts[1])
            elif "-" in parts[0] and len(parts) >= 5:
                cur = (parts[5] if len(parts) > 5 else "", {})
                out.append(cur)
    return out


def monitor_memory(pid, pmem_paths):
    """KiB: guest RAM resident, pmem page cache (PSS), the rest (PSS), total PSS."""
    guest = pmem = other = 0
    for path, f in smaps(pid):
        if path.startswith("/memfd:dsec-guest-ram"):
            guest += f.get("Rss", 0)
        elif path in pmem_paths:
            pmem += f.get("Pss", 0)
        else:
            other += f.get("Pss", 0)
    return {"guest_kib": guest, "pmem_pss_kib": pmem, "overhead_kib": other,
            "pss_kib": guest + pmem + other}


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_kib(path):
    """Page-cache KiB of a file (util-linux fincore)."""
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                       capture_output=True, text=True)
    return int(r.stdout.strip() or 0) // 1024 if r.returncode == 0 else -1


# --- guests --------------------------------------------------------------------


class Guest:
    def __init__(self, a, tmp, name, cmdline, pmems=(), disks=(), extra=(), preexec=None):
        self.console = os.path.join(tmp, name + ".console")
        self.argv = [a.vmm, "vm", "run", "--kernel", a.kernel, "--cmdline", cmdline,
                     "--mem-mib", str(a.mem_mib), "--console", self.console, "--console-rate-bytes", "0",
                     "--timeout-ms", str(int(a.timeout * 1000))]
        for p in pmems:
            self.argv += ["--pmem", p + ",ro"]
        for d in disks:
            self.argv += ["--disk", d + ",ro"]
        self.argv += list(extra)
        self.log = open(os.path.join(tmp, name + ".log"), "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, preexec_fn=preexec)

    def text(self):
        try:
            with open(self.console, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait_for(self, marker, deadline):
        while time.monotonic() < deadline:
            if marker in self.text():
                return True
            if self.proc.poll() is not None:
                return marker in self.text()
            time.sleep(0.2)  # the console is a file: no event to wait on
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()

    def tail(self):
        return self.text()[-1500:]


def run_cmdline(command, layers):
    cmd = base64.b64encode(command.encode()).decode()
    return BASE_CMDLINE + "dsec.layers=%s dsec.run=%s dsec.oneshot=1" % (layers, cmd)


def build_data_layer(a, tmp, mib):
    """A busybox layer with /data/blob of `mib` MiB of random bytes, padded to 2 MiB."""
    tree = os.path.join(tmp, "data-tree")
    os.makedirs(os.path.join(tree, "bin"))
    for d in ("proc", "sys", "dev", "tmp", "root", "data"):
        os.makedirs(os.path.join(tree, d), exist_ok=True)
    shutil.copy2("/bin/busybox", os.path.join(tree, "bin", "busybox"))
    for app in APPLETS:
        os.symlink("busybox", os.path.join(tree, "bin", app))
    with open(os.path.join(tree, "data", "blob"), "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MIB))
    image = os.path.join(tmp, "data.erofs")
    subprocess.run(["mkfs.erofs", "--quiet", "-T0", "--all-root", "-Enoinline_data", image, tree], check=True)
    shutil.rmtree(tree)
    size = os.path.getsize(image)
    os.truncate(image, (size + 2 * MIB - 1) // (2 * MIB) * (2 * MIB))
    return image


# --- modes ---------------------------------------------------------------------


def pmem_density(a, tmp, root):
    layer = build_data_layer(a, tmp, a.image_mib)
    want = a.image_mib * MIB
    rounds = {}
    for mode in ("baseline", "pmem-dax", "virtio-blk"):
        drop_cache(layer)
        cached_before = resident_kib(layer)
        cg = Cgroup("dsec-pmem-density-" + mode)
        guests = []
        try:
            t0 = time.monotonic()
            for i in range(a.vms):
                if mode == "baseline":
                    cmd = "echo DSEC-READ-DONE 0; sleep 3600"
                    guests.append(Guest(a, tmp, "%s-%d" % (mode, i), run_cmdline(cmd, "/dev/pmem1"),
                                        pmems=(root, linux_guest_layer(a, tmp)), preexec=cg.join_fn()))
                    continue
                cmd = "echo DSEC-READ-DONE $(cat /data/blob | wc -c); sleep 3600"
                if mode == "pmem-dax":
                    guests.append(Guest(a, tmp, "%s-%d" % (mode, i), run_cmdline(cmd, "/dev/pmem1"),
                                        pmems=(root, layer), preexec=cg.join_fn()))
                else:
                    guests.append(Guest(a, tmp, "%s-%d" % (mode, i), run_cmdline(cmd, "/dev/vda"),
                                        pmems=(root,), disks=(layer,), preexec=cg.join_fn()))
            deadline = time.monotonic() + a.timeout
            failed = [g for g in guests if not g.wait_for("DSEC-READ-DONE", deadline)]
            if failed:
                raise RuntimeError("%s: %d guests did not finish reading; one console:\n%s"
                                   % (mode, len(failed), failed[0].tail()))
            sizes = set()
            for g in guests:
                for line in g.text().splitlines():
                    if "DSEC-READ-DONE" in line:
                        sizes.add(int(line.split("DSEC-READ-DONE", 1)[1].split()[0]))
            if mode != "baseline" and sizes != {want}:
                raise RuntimeError("%s: guests read %s bytes, want %d" % (mode, sorted(sizes), want))
            elapsed = time.monotonic() - t0
            # The layer's cache was dropped before the round, so its host
            # page cache is charged to the first of the round's monitors to
            # touch it (memcg charges the first toucher): memory.peak holds
            # it once. Its size is reported, not added.
            shared = max(resident_kib(layer), 0)
            if cached_before > 1024:
                raise RuntimeError("%s: %d KiB of the layer stayed cached after the drop: "
                                   "they would be charged outside the round" % (mode, cached_before))
            peak = int(cg.read("memory.peak")) // 1024
            current = int(cg.read("memory.current")) // 1024
            rounds[mode] = {"layer_cache_mib": round(shared / 1024, 1), "peak_mib": round(peak / 1024, 1), "current_mib": round(current / 1024, 1),
                            "layer_cache_mib_before": round(cached_before / 1024, 1),
                            "seconds_all_read": round(elapsed, 1)}
        finally:
            for g in guests:
                g.stop()
            cg.close()
    out = {"mode": "pmem-density", "vms": a.vms, "image_mib": a.image_mib, "mem_mib": a.mem_mib,
           "rounds": rounds}
    dax, blk = rounds["pmem-dax"]["peak_mib"], rounds["virtio-blk"]["peak_mib"]
    out["reduction_pct"] = round(100 * (1 - dax / blk), 1)
    print("%-11s %12s %14s %10s" % ("round", "peak MiB", "current MiB", "all read s"))
    for mode, r in rounds.items():
        print("%-11s %12.1f %14.1f %10.1f" % (mode, r["peak_mib"], r["current_mib"], r["seconds_all_read"]))
    print("pmem-DAX uses %.1f%% less host memory than virtio-blk (%d guests, %d MiB layer)"
          % (out["reduction_pct"], a.vms, a.image_mib))
    return out


_busybox_layer = {}


def linux_guest_layer(a, tmp):
    if "path" not in _busybox_layer:
        _busybox_layer["path"] = linux_guest.build_layer(tmp)
    return _busybox_layer["path"]


def fpr(a, tmp, root):
    layer = build_data_layer(a, tmp, 0)
    fill = a.fill_mib
    cmd = ("echo DSEC-BOOTED; sleep 3; dd if=/dev/zero of=/tmp/fill bs=1M count=%d 2>/dev/null; sync; "
           "echo DSEC-FILLED; sleep 4; rm /tmp/fill; echo DSEC-FREED; sleep 3600" % fill)
    cmdline = run_cmdline(cmd, "/dev/pmem1").replace("dsec.upper=tmpfs:64", "dsec.upper=tmpfs:%d" % (fill + 64))
    g = Guest(a, tmp, "fpr", cmdline, pmems=(root, layer), extra=("--balloon",))
    samples = []
    try:
        deadline = time.monotonic() + a.timeout
        if not g.wait_for("DSEC-BOOTED", deadline):
            raise RuntimeError("the guest did not boot:\n" + g.tail())
        marks = {}
        t_end = None
        while time.monotonic() < deadline:
            text = g.text()
            now = time.monotonic()
            m = monitor_memory(g.proc.pid, ())
            samples.append((now, m["guest_kib"]))
            for mark in ("DSEC-FILLED", "DSEC-FREED"):
                if mark in text and mark not in marks:
                    marks[mark] = (now, m["guest_kib"])
            if "DSEC-FREED" in marks and t_end is None:
                t_end = marks["DSEC-FREED"][0] + a.watch_s
            if t_end is not None and now >= t_end:
                break
            if g.proc.poll() is not None:
                raise RuntimeError("the monitor exited:\n" + g.tail())
            time.sleep(0.1)  # sampling period
        if "DSEC-FREED" not in marks:
            raise RuntimeError("the guest did not free its fill in time:\n" + g.tail())
    finally:
        g.stop()
    booted = min(k for t, k in samples)
    filled = marks["DSEC-FILLED"][1]
    freed_at, at_free = marks["DSEC-FREED"]
    after = [(t - freed_at, k) for t, k in samples if t >= freed_at]
    grown = filled - booted

    def returned_within(sec):
        ks = [k for dt, k in after if dt <= sec]
        return (filled - min(ks)) if ks else 0

    out = {"mode": "fpr", "mem_mib": a.mem_mib, "fill_mib": fill,
           "guest_resident_mib": {"booted": round(booted / 1024, 1), "filled": round(filled / 1024, 1),
                                  "at_free": round(at_free / 1024, 1),
                                  "end": round(after[-1][1] / 1024, 1)},
           "returned_pct_within": {}}
    for sec in (1, 2, 3, 5, a.watch_s):
        out["returned_pct_within"]["%gs" % sec] = round(100 * returned_within(sec) / grown, 1) if grown else 0
    print("guest RAM resident in the monitor: booted %.1f MiB, filled %.1f MiB (+%.1f), at free %.1f MiB"
          % (booted / 1024, filled / 1024, grown / 1024, at_free / 1024))
    for k, v in out["returned_pct_within"].items():
        print("  back on the host within %-4s %5.1f%% of what the guest freed" % (k + ":", v))
    return out


def reclaim(a, tmp, root):
    """One Linux guest per mode fills its page cache from a virtio-blk layer,
    then idles; the monitor's reclaim controller (vm run --reclaim) should
    take the cache back through the balloon. Guest RAM resident sampled
    from the read's end for --watch-s; time-integrated memory per mode."""
    layer = build_data_layer(a, tmp, a.image_mib)
    cmd = "echo DSEC-BOOTED; cat /data/blob > /dev/null; echo DSEC-READ; sleep 3600"
    rows = {}
    for mode in a.modes:
        drop_cache(layer)
        extra = ["--balloon", "--reclaim", mode] if mode != "off" else ["--balloon"]
        g = Guest(a, tmp, "reclaim-" + mode, run_cmdline(cmd, "/dev/vda"), pmems=(root,), disks=(layer,),
                  extra=extra)
        try:
            deadline = time.monotonic() + a.timeout
            if not g.wait_for("DSEC-READ", deadline):
                raise RuntimeError("%s: the guest did not read its layer:\n%s" % (mode, g.tail()))
            t0 = time.monotonic()
            samples = []
            while time.monotonic() < t0 + a.watch_s:
                if g.proc.poll() is not None:
                    raise RuntimeError("%s: the monitor exited:\n%s" % (mode, g.tail()))
                samples.append((time.monotonic() - t0, monitor_memory(g.proc.pid, ())["guest_kib"]))
                time.sleep(0.2)  # sampling period
        finally:
            g.stop()
        gib_s = sum((t2 - t1) * k1 for (t1, k1), (t2, _) in zip(samples, samples[1:])) / (1 << 20)
        rows[mode] = {"start_mib": round(samples[0][1] / 1024, 1), "end_mib": round(samples[-1][1] / 1024, 1),
                      "min_mib": round(min(k for _, k in samples) / 1024, 1), "gib_s": round(gib_s, 3)}
    out = {"mode": "reclaim", "mem_mib": a.mem_mib, "image_mib": a.image_mib, "watch_s": a.watch_s,
           "rounds": rows}
    print("%-8s %10s %8s %8s %8s %10s" % ("reclaim", "start MiB", "min MiB", "end MiB", "GiB x s", "reduction"))
    for mode, r in rows.items():
        red = ""
        if "off" in rows and mode != "off" and rows["off"]["gib_s"]:
            r["reduction_pct"] = round(100 * (1 - r["gib_s"] / rows["off"]["gib_s"]), 1)
            red = "%.1f%%" % r["reduction_pct"]
        print("%-8s %10.1f %8.1f %8.1f %8.3f %10s" % (mode, r["start_mib"], r["min_mib"], r["end_mib"],
                                                       r["gib_s"], red))
    return out


def idle(a, tmp, root):
    layer = linux_guest_layer(a, tmp)
    extra = ("--balloon",) if a.balloon else ()
    guests = []
    try:
        for i in range(a.vms):
            # The agent serving vsock as the tier runs it, idle; the console
            # line tells us it listens.
            cmdline = BASE_CMDLINE + "dsec.layers=/dev/pmem1 dsec.port=1024"
            guests.append(Guest(a, tmp, "idle-%d" % i, cmdline, pmems=(root, layer),
                                extra=extra + ("--vsock", "%d,%s" % (3 + i, os.path.join(tmp, "v%d.sock" % i)))))
        deadline = time.monotonic() + a.timeout
        for g in guests:
            if not g.wait_for("listening vsock", deadline):
                raise RuntimeError("a guest did not reach its agent:\n" + g.tail())
        settle_end = time.monotonic() + a.settle_s
        while time.monotonic() < settle_end:
            time.sleep(0.5)  # let idle guests settle (page reporting, lazy frees): a duration, not a sync
        per = [monitor_memory(g.proc.pid, (root, layer)) for g in guests]
    finally:
        for g in guests:
            g.stop()

    def med(key):
        vals = sorted(p[key] for p in per)
        return vals[len(vals) // 2] / 1024

    out = {"mode": "idle", "vms": a.vms, "mem_mib": a.mem_mib, "balloon": a.balloon,
           "per_vm_mib": {"guest_resident": round(med("guest_kib"), 2),
                          "monitor_overhead": round(med("overhead_kib"), 2),
                          "layers_page_cache_share": round(med("pmem_pss_kib"), 2),
                          "all": round(med("pss_kib"), 2)}}
    out["vms_per_gib"] = round(1024 / out["per_vm_mib"]["all"], 1)
    p = out["per_vm_mib"]
    print("%d idle Linux microVMs (%d MiB each%s), median per VM: guest RAM resident %.2f MiB, "
          "monitor overhead %.2f MiB, layers' page cache share %.2f MiB, all %.2f MiB -> %.1f per GiB"
          % (a.vms, a.mem_mib, ", balloon" if a.balloon else "", p["guest_resident"], p["monitor_overhead"],
             p["layers_page_cache_share"], p["all"], out["vms_per_gib"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmm", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--source", required=True, help="the checkout (tools/build-guest-image.sh)")
    ap.add_argument("--kernel", default=linux_guest.default_kernel())
    ap.add_argument("--timeout", type=float, default=900, help="seconds for each round")
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("pmem-density")
    p.add_argument("--vms", type=int, default=8)
    p.add_argument("--image-mib", type=int, default=256)
    p.add_argument("--mem-mib", type=int, default=512)
    p = sub.add_parser("fpr")
    p.add_argument("--fill-mib", type=int, default=256)
    p.add_argument("--mem-mib", type=int, default=512)
    p.add_argument("--watch-s", type=float, default=10)
    p = sub.add_parser("reclaim")
    p.add_argument("--image-mib", type=int, default=256)
    p.add_argument("--mem-mib", type=int, default=512)
    p.add_argument("--watch-s", type=float, default=30)
    p.add_argument("--modes", nargs="+", default=["off", "balloon"],
                   choices=["off", "balloon", "pageout", "both"])
    p = sub.add_parser("idle")
    p.add_argument("--vms", type=int, default=8)
    p.add_argument("--mem-mib", type=int, default=256)
    p.add_argument("--settle-s", type=float, default=20)
    p.add_argument("--balloon", action="store_true")
    a = ap.parse_args()
    missing = linux_guest.missing_prerequisite(a.kernel, a.agent)
    if missing:
        print("SKIP: " + missing)
        return 77
    tmp = tempfile.mkdtemp(prefix="dsec-linux-memory.")
    try:
        root = os.path.join(tmp, "root.erofs")
        subprocess.run([os.path.join(a.source, "tools", "build-guest-image.sh"), a.agent, root], check=True,
                       stdout=subprocess.DEVNULL)
        out = {"pmem-density": pmem_density, "fpr": fpr, "reclaim": reclaim, "idle": idle}[a.mode](a, tmp, root)
        print(json.dumps(out))
        return 0
    except Skip as e:
        print("SKIP: %s" % e)
        return 77
    except RuntimeError as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Boot time and peak RSS of the Linux guest kernel under dsec-vmm against
QEMU `-M microvm -accel kvm`, in the same L1 (nested bed), interleaved.

Both boot the same kernel (the project's guest kernel, bzImage), the same
command line and the same root: a read-only EROFS image on virtio-blk
(virtio-mmio in both) whose /init is busybox running `reboot -f`; with
`reboot=t` the guest ends in a triple fault, which ends both monitors (QEMU
with -no-reboot). What is timed is the whole process, spawn to exit: boot
to the first userspace program, then teardown. Peak RSS is the process's
ru_maxrss. A second, untimed pass samples each monitor's /proc/PID/smaps
every 20 ms and reports its own memory: RSS minus the guest RAM it backs
(our memfd `dsec-guest-ram-*`; QEMU's RAM is put in a memory-backend-memfd
for this, whose memfd QEMU names `memory-backend-memfd`), the largest sample
of a run, counted only once guest RAM is mapped (before, `vm run` is the
dsec-vmm front end that execs dsec-monitor); a run in which no such mapping
was seen is an error, not a figure. Peak RSS counts the
guest's RAM, which the same kernel touches alike in both; the monitor's own
memory is what a monitor costs. Prints medians and the ratios, and one JSON
line.

    tests/nested/bed.py run -- python3 tests/nested/boot_compare.py \\
        --vmm build/dsec-vmm --runs 10

Exit: 0 done, 1 a boot failed, 77 skip (no /dev/kvm, QEMU, busybox, mkfs.erofs).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CMDLINE = "console=ttyS0 root=/dev/vda rootfstype=erofs ro init=/init reboot=t panic=-1 quiet"


def default_kernel():
    cache = os.environ.get("DSEC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dsec-vmm")
    return os.path.join(cache, "guest-kernel", "current", "bzImage")


def make_root(tmp, busybox):
    tree = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(tree, "bin"))
    for d in ("dev", "proc", "sys"):
        os.makedirs(os.path.join(tree, d))
    shutil.copy(busybox, os.path.join(tree, "bin", "busybox"))
    os.symlink("busybox", os.path.join(tree, "bin", "sh"))
    with open(os.path.join(tree, "init"), "w") as f:
        f.write("#!/bin/sh\n/bin/busybox reboot -f\n")
    os.chmod(os.path.join(tree, "init"), 0o755)
    img = os.path.join(tmp, "root.erofs")
    subprocess.run(["mkfs.erofs", img, tree], check=True, capture_output=True)
    return img


def timed(argv, timeout):
    """(seconds, peak RSS KiB, exit status) of one run."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    deadline = t0 + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            return None, None, "timeout"
        time.sleep(0.001)
    t = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    return t, ru.ru_maxrss, (p.returncode, err[-300:])


def own_memory_kib(pid, ram_name):
    """(RSS minus the RSS of the guest-RAM mapping, that mapping's RSS), KiB
    (None once the process is gone)."""
    total = ram = 0
    in_ram = False
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                parts = line.split()
                if not parts:
                    continue
                if not parts[0].endswith(":"):
                    in_ram = len(parts) > 5 and parts[5].startswith("/memfd:" + ram_name)
                elif parts[0] == "Rss:":
                    total += int(parts[1])
                    if in_ram:
                        ram += int(parts[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return total - ram, ram


def sampled(argv, ram_name, timeout):
    """The largest own-memory sample (KiB) of one run, and its exit status;
    raises if the guest-RAM mapping never showed up (a wrong name would
    count guest RAM as the monitor's own)."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    best = seen_ram = 0
    while p.poll() is None and time.monotonic() < deadline:
        m = own_memory_kib(p.pid, ram_name)
        # Only samples with guest RAM mapped: before that, `vm run` is
        # still the dsec-vmm front end that execs dsec-monitor (same pid).
        if m is not None and m[1]:
            best = max(best, m[0])
            seen_ram = max(seen_ram, m[1])
        time.sleep(0.02)  # sampling period
    if p.poll() is None:
        p.kill()
    status = p.wait()
    if not seen_ram:
        raise RuntimeError("%s: no resident mapping /memfd:%s in its smaps" % (argv[0], ram_name))
    return best, status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmm", required=True, help="build/dsec-vmm")
    ap.add_argument("--kernel", default=default_kernel())
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--mem-mib", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--own-runs", type=int, default=5, help="sampled runs per monitor for own memory")
    a = ap.parse_args()
    qemu = shutil.which("qemu-system-x86_64")
    busybox = shutil.which("busybox") or "/bin/busybox"
    for need, what in ((os.path.exists("/dev/kvm"), "/dev/kvm"), (qemu, "qemu-system-x86_64"),
                       (os.path.exists(busybox), "busybox"), (shutil.which("mkfs.erofs"), "mkfs.erofs"),
                       (os.path.exists(a.kernel), a.kernel)):
        if not need:
            print("SKIP: no %s" % what)
            return 77
    with tempfile.TemporaryDirectory(prefix="dsec-boot-compare.") as tmp:
        img = make_root(tmp, busybox)
        ours = [a.vmm, "vm", "run", "--kernel", a.kernel, "--mem-mib", str(a.mem_mib), "--console", "none",
                "--disk", img + ",ro", "--cmdline", CMDLINE, "--timeout-ms", str(int(a.timeout * 1000))]
        peer = [qemu, "-M", "microvm,memory-backend=dsec-peer-ram", "-accel", "kvm", "-cpu", "host",
                "-object", "memory-backend-memfd,id=dsec-peer-ram,size=%dM" % a.mem_mib,
                "-m", str(a.mem_mib), "-smp", "1",
                "-kernel", a.kernel, "-append", CMDLINE, "-nodefaults", "-no-user-config", "-nographic",
                "-no-reboot", "-serial", "null",
                "-drive", "id=root,file=%s,format=raw,if=none,readonly=on" % img,
                "-device", "virtio-blk-device,drive=root"]
        results = {"dsec-vmm": [], "qemu-microvm": []}
        failed = []
        for i in range(a.runs):
            # Interleaved, alternating which goes first.
            order = [("dsec-vmm", ours), ("qemu-microvm", peer)]
            if i % 2:
                order.reverse()
            for name, argv in order:
                t, rss, end = timed(argv, a.timeout)
                if t is None or (name == "dsec-vmm" and end[0] not in (3, 4)) or \
                        (name == "qemu-microvm" and end[0] != 0):
                    failed.append((name, end))
                    continue
                results[name].append((t, rss))
        own = {"dsec-vmm": [], "qemu-microvm": []}
        for i in range(a.own_runs):
            order = [("dsec-vmm", ours, "dsec-guest-ram"), ("qemu-microvm", peer, "memory-backend-memfd")]
            if i % 2:
                order.reverse()
            for name, argv, ram_name in order:
                kib, status = sampled(argv, ram_name, a.timeout)
                if kib:
                    own[name].append(kib)
        out = {"runs": a.runs, "kernel": a.kernel, "mem_mib": a.mem_mib}
        for name, rs in results.items():
            if rs:
                out[name] = {"wall_ms_p50": round(statistics.median(r[0] for r in rs) * 1000, 1),
                             "peak_rss_kib_p50": int(statistics.median(r[1] for r in rs)),
                             "ok_runs": len(rs)}
        for name, ks in own.items():
            if ks and name in out:
                out[name]["own_memory_kib_p50"] = int(statistics.median(ks))
        if own["dsec-vmm"] and own["qemu-microvm"]:
            out["own_memory_ratio_qemu_over_dsec"] = round(
                statistics.median(own["qemu-microvm"]) / statistics.median(own["dsec-vmm"]), 2)
        if results["dsec-vmm"] and results["qemu-microvm"]:
            o, q = out["dsec-vmm"], out["qemu-microvm"]
            out["wall_ratio_qemu_over_dsec"] = round(q["wall_ms_p50"] / o["wall_ms_p50"], 2)
            out["rss_ratio_qemu_over_dsec"] = round(q["peak_rss_kib_p50"] / o["peak_rss_kib_p50"], 2)
        for name in results:
            if name in out:
                print("%-13s wall p50 %8.1f ms  peak RSS p50 %7d KiB  (%d runs)" % (
                    name, out[name]["wall_ms_p50"], out[name]["peak_rss_kib_p50"], out[name]["ok_runs"]))
        if "wall_ratio_qemu_over_dsec" in out:
            print("QEMU/dsec-vmm: wall %.2fx, peak RSS %.2fx" % (out["wall_ratio_qemu_over_dsec"],
                                                              out["rss_ratio_qemu_over_dsec"]))
        if "own_memory_ratio_qemu_over_dsec" in out:
            print("own memory (RSS - guest RAM), p50 of %d sampled runs: dsec-vmm %d KiB, QEMU %d KiB: %.2fx"
                  % (a.own_runs, out["dsec-vmm"]["own_memory_kib_p50"],
                     out["qemu-microvm"]["own_memory_kib_p50"], out["own_memory_ratio_qemu_over_dsec"]))
        for f in failed[:4]:
            print("failed: %s %s" % f)
        print(json.dumps(out))
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Boots the project's Linux guest kernel under `dsec-vmm vm run` and times
it: run inside L1 by `bed.py run` (ctest nested_linux_guest_oneshot), where
/dev/kvm has hardware-virtualisation semantics.

The guest is what the microvm tier boots (sandbox/microvm/vm_process.cc
VmArgv, LinuxCmdline): the root image from tools/build-guest-image.sh (the
static dsec-agent as /sbin/init) on pmem0, plus an EROFS layer with busybox
on pmem1 (DAX), a tmpfs upper, and instead of vsock serving a `dsec.run`
command with `dsec.oneshot=1`: the agent runs it on the console and powers
the guest off. Every console line is timestamped from the monitor's start;
the timeline is printed, then checked: the command ran (exit 0), the guest
powered off, and `vm run` ended by itself soon after (status 0, stop reason
guest-shutdown), not at --timeout-ms.

  linux_guest.py --vmm BUILD/dsec-vmm --agent BUILD/guest-kernel/agent/dsec-agent
                 --source CHECKOUT [--kernel VMLINUX] [--timeout-ms N] [--end reboot]

--end reboot: the command ends with `reboot -f` (and the kernel gets
reboot=k) instead of dsec.oneshot's power-off; then the check is that the
guest's i8042 reset pulse stops vm run at once (stop reason reset, status 3).
Exit: 0 pass, 1 fail, 77 skip (no guest kernel, agent, busybox, mkfs.erofs).
"""
import argparse
import base64
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

TWO_MIB = 2 << 20
APPLETS = ("sh", "echo", "cat", "uname", "mount", "grep", "reboot")
# Marks in the console, in boot order: (label, text the line contains).
MARKS = (("kernel start", "Linux version"),
         ("root mounted", "VFS: Mounted root"),
         ("agent (/sbin/init)", "dsec-agent:"),
         ("root ready", "dsec-agent: root ready"),
         ("command output", "dsec-test: hello"),
         ("command exit", "dsec-agent: run exit="),
         ("powering off", "dsec-agent: powering off"),
         ("kernel power down", "reboot: Power down"),
         ("kernel halt", "reboot: System halted"),
         ("kernel restart", "reboot: Restarting system"),
         ("monitor: vm stopped", "vm stopped"))
COMMAND = 'echo "dsec-test: hello from $(uname -r)"; grep -E " (erofs|overlay) " /proc/mounts'
# After the guest powered off, vm run should end within this.
EXIT_AFTER_POWEROFF_S = 10


def default_kernel():
    cache = os.environ.get("DSEC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dsec-vmm")
    return os.path.join(cache, "guest-kernel", "current", "vmlinux")


def build_layer(tmp):
    tree = os.path.join(tmp, "layer")
    os.makedirs(os.path.join(tree, "bin"))
    for d in ("proc", "sys", "dev", "tmp", "root"):
        os.mkdir(os.path.join(tree, d))
    shutil.copy2("/bin/busybox", os.path.join(tree, "bin", "busybox"))
    for a in APPLETS:
        os.symlink("busybox", os.path.join(tree, "bin", a))
    image = os.path.join(tmp, "layer.erofs")
    subprocess.run(["mkfs.erofs", "--quiet", "-T0", "--all-root", "-Enoinline_data", image, tree], check=True)
    size = os.path.getsize(image)
    os.truncate(image, (size + TWO_MIB - 1) // TWO_MIB * TWO_MIB)
    return image


def boot(argv, deadline_s):
    """[(seconds since start, line)], vm run's exit status (None: killed at the deadline)."""
    start = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    lines, buf = [], b""
    try:
        while True:
            left = start + deadline_s - time.monotonic()
            if left <= 0:
                p.kill()
                p.wait()
                return lines, None
            if not sel.select(left):
                continue
            data = os.read(p.stdout.fileno(), 65536)
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                lines.append((time.monotonic() - start, line.decode(errors="replace").rstrip("\r")))
        if buf:
            lines.append((time.monotonic() - start, buf.decode(errors="replace")))
        return lines, p.wait()
    finally:
        sel.close()
        p.stdout.close()


def missing_prerequisite(kernel, agent):
    """Why a Linux guest cannot be built and booted here (None: it can)."""
    for path, why in ((kernel, "guest kernel (tools/build-guest-kernel.sh)"), (agent, "dsec-agent"),
                      ("/bin/busybox", "busybox (busybox-static)"), ("/dev/kvm", "/dev/kvm")):
        if not os.path.exists(path):
            return "no %s at %s" % (why, path)
    if not shutil.which("mkfs.erofs"):
        return "mkfs.erofs not installed (erofs-utils)"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmm", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--source", required=True, help="the checkout (tools/build-guest-image.sh)")
    ap.add_argument("--kernel", default=default_kernel())
    ap.add_argument("--timeout-ms", type=int, default=120000)
    ap.add_argument("--mem-mib", type=int, default=512)
    ap.add_argument("--vcpus", type=int, default=1)
    ap.add_argument("--end", choices=("oneshot", "reboot"), default="oneshot")
    ap.add_argument("--vmm-arg", action="append", default=[],
                    help="an extra argument for vm run (repeatable)")
    a = ap.parse_args()
    missing = missing_prerequisite(a.kernel, a.agent)
    if missing:
        print("SKIP: " + missing)
        return 77
    tmp = tempfile.mkdtemp(prefix="dsec-linux-guest.")
    try:
        t = time.monotonic()
        root = os.path.join(tmp, "root.erofs")
        subprocess.run([os.path.join(a.source, "tools", "build-guest-image.sh"), a.agent, root], check=True,
                       stdout=subprocess.DEVNULL)
        layer = build_layer(tmp)
        print("images built in %.1f s" % (time.monotonic() - t))
        command = COMMAND + ("; reboot -f" if a.end == "reboot" else "")
        cmd = base64.b64encode(command.encode()).decode()
        cmdline = ("console=ttyS0 root=/dev/pmem0 rootfstype=erofs ro rootwait rootflags=dax=always "
                   "dsec.layers=/dev/pmem1 dsec.upper=tmpfs:64 dsec.run=%s " % cmd)
        cmdline += "reboot=k" if a.end == "reboot" else "dsec.oneshot=1"
        argv = [a.vmm, "vm", "run", "--kernel", a.kernel, "--cmdline", cmdline, "--mem-mib", str(a.mem_mib),
                "--vcpus", str(a.vcpus), "--pmem", root + ",ro", "--pmem", layer + ",ro",
                "--console", "stdio", "--console-rate-bytes", "0", "--log-level", "info",
                "--timeout-ms", str(a.timeout_ms), "--stats-json", os.path.join(tmp, "stats.json")]
        argv += a.vmm_arg
        print("$ " + " ".join(argv), flush=True)
        lines, status = boot(argv, a.timeout_ms / 1000 + 30)
        for secs, line in lines:
            print("%8.3f  %s" % (secs, line))
        seen = {}
        for label, text in MARKS:
            for secs, line in lines:
                if text in line:
                    seen[label] = secs
                    break
        print("\ntimeline (s since vm run started; absent marks did not appear):")
        for label, _ in MARKS:
            if label in seen:
                print("  %-22s %8.3f" % (label, seen[label]))
        end = lines[-1][0] if lines else 0
        print("  %-22s %8.3f (status %s)" % ("vm run exit", end, status))
        if os.path.exists(os.path.join(tmp, "stats.json")):
            with open(os.path.join(tmp, "stats.json")) as f:
                print("stats.json: " + f.read().strip())
        failures = []
        if a.end == "oneshot":
            if not any("dsec-agent: run exit=0" in line for _, line in lines):
                failures.append("the command did not run to exit 0")
            want_mark, want_status = "kernel power down", 0
        else:
            if not any("dsec-test: hello" in line for _, line in lines):
                failures.append("the command did not run")
            want_mark, want_status = "kernel restart", 3
        if "kernel halt" in seen:
            failures.append("the guest kernel halted instead of powering off (it has no power-off method: "
                            "no ACPI)")
        if want_mark not in seen:
            failures.append("no '%s' on the console" % dict(MARKS)[want_mark])
        elif end - seen[want_mark] > EXIT_AFTER_POWEROFF_S:
            failures.append("vm run ended %.1f s after the guest's %s (status %s)"
                            % (end - seen[want_mark], want_mark, status))
        if status != want_status:
            failures.append("vm run exited %s, expected %d" % (status, want_status))
        for f in failures:
            print("FAIL: " + f)
        return 1 if failures else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Boots the Linux guest kernel with the dsec-agent root image under QEMU.

Usage: guest_qemu_test.py AGENT_BINARY BUILD_GUEST_IMAGE_SH

QEMU q35 (TCG: KVM is PVM on the development hosts) boots the cached
bzImage with two virtio-pmem devices: pmem0 = the root image built from
AGENT_BINARY by tools/build-guest-image.sh, pmem1 = an EROFS layer holding
busybox and a marker file. The agent (PID 1) mounts the layer with DAX,
stacks an overlay with a tmpfs upper, pivots into it, runs the command from
`dsec.run=` and powers off (`dsec.oneshot=1`). The test checks the console.

Exit status: 0 pass, 1 fail, 77 skip (ctest SKIP_RETURN_CODE), with the
reason on stdout.
"""

import base64
import os
import re
import secrets
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

from guest_kernel_dir import find_kernel_dir

SKIP = 77
BOOT_DEADLINE_S = float(os.environ.get("DSEC_GUEST_QEMU_DEADLINE", "240"))
TWO_MIB = 2 * 1024 * 1024
BUSYBOX_APPLETS = ("sh", "echo", "cat", "grep", "uname", "ls", "mount")

# Runs in the guest after pivot_root, as `/bin/sh -c`. Every line of result
# starts with `dsec-test:` so that it cannot be confused with the kernel's
# echo of the command line (which holds only base64).
GUEST_COMMAND = r"""
[ -r /proc/mounts ] || mount -t proc proc /proc
echo "dsec-test: uname=$(uname -r)"
echo "dsec-test: marker=$(cat /marker.txt)"
grep -E ' (erofs|overlay) ' /proc/mounts | while read -r line; do echo "dsec-test: mount $line"; done
echo "$(cat /marker.txt)-written" > /overlay-write.txt && echo "dsec-test: write=$(cat /overlay-write.txt)"
"""


class Skip(Exception):
    pass


def run(argv, **kwargs):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, **kwargs)


def pad_to_2mib(path):
    size = os.path.getsize(path)
    os.truncate(path, (size + TWO_MIB - 1) // TWO_MIB * TWO_MIB)


def build_layer(tmp, marker):
    tree = os.path.join(tmp, "layer")
    os.makedirs(os.path.join(tree, "bin"))
    for d in ("proc", "sys", "dev", "tmp"):
        os.mkdir(os.path.join(tree, d))
    shutil.copy2("/bin/busybox", os.path.join(tree, "bin", "busybox"))
    for applet in BUSYBOX_APPLETS:
        os.symlink("busybox", os.path.join(tree, "bin", applet))
    with open(os.path.join(tree, "marker.txt"), "w", encoding="ascii") as f:
        f.write(marker + "\n")
    image = os.path.join(tmp, "layer.erofs")
    # Uncompressed and without tail inlining so that files are mapped with DAX.
    run(["mkfs.erofs", "--quiet", "-T0", "--all-root", "-Enoinline_data", image, tree])
    pad_to_2mib(image)
    return image


def pmem_args(index, path):
    size = os.path.getsize(path)
    return ["-object", f"memory-backend-file,id=pmem{index}mem,share=on,mem-path={path},size={size}",
            "-device", f"virtio-pmem-pci,memdev=pmem{index}mem,id=pmem{index}"]


def boot(qemu, kernel, root_image, layer_image, cmdline, log_path):
    """Runs QEMU until it exits or the deadline passes; returns (exit, lines)."""
    argv = [qemu, "-M", "q35", "-accel", "tcg", "-smp", "1",
            "-m", "512M,slots=2,maxmem=2G", "-nographic", "-nodefaults", "-no-user-config",
            "-no-reboot", "-serial", "stdio", "-kernel", kernel, "-append", cmdline]
    argv += pmem_args(0, root_image) + pmem_args(1, layer_image)
    print("qemu:", " ".join(argv), flush=True)
    lines = []
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + BOOT_DEADLINE_S
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    try:
        with open(log_path, "wb") as log:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, lines
                if not sel.select(timeout=left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                log.write(chunk)
                buf += chunk
                *done, buf = buf.split(b"\n")
                lines += [d.decode("utf-8", "replace").rstrip("\r") for d in done]
        if buf:
            lines.append(buf.decode("utf-8", "replace").rstrip("\r"))
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), lines
    except subprocess.TimeoutExpired:
        return None, lines
    finally:
        sel.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def find(lines, pattern):
    rx = re.compile(pattern)
    return [l for l in lines if rx.search(l)]


def check(lines, exit_status, marker, release):
    """Returns (failures, asserted console lines)."""
    failures, shown = [], []

    def expect(what, pattern):
        hits = find(lines, pattern)
        if hits:
            shown.append(hits[0])
        else:
            failures.append(f"{what}: no console line matches /{pattern}/")
        return hits

    expect("agent started as PID 1", r"dsec-agent: pid 1 started")
    expect("agent saw the layer with DAX", r"dsec-agent: layer /dev/pmem1 at \S+ dax=1")
    expect("agent pivoted into the overlay", r"dsec-agent: root ready")
    expect("guest runs the built kernel", r"dsec-test: uname=" + re.escape(release) + r"$")
    expect("layer's marker file is visible", r"dsec-test: marker=" + re.escape(marker) + r"$")
    expect("layer mounted as erofs with dax",
           r"dsec-test: mount /dev/pmem1 \S+ erofs \S*\bdax\b")
    expect("overlay is the root", r"dsec-test: mount \S+ / overlay ")
    expect("write into the overlay", r"dsec-test: write=" + re.escape(marker) + r"-written$")
    expect("command exited 0", r"dsec-agent: run exit=0\b")
    expect("kernel powered off", r"reboot: Power down")
    for bad in find(lines, r"Kernel panic|BUG:|Oops"):
        failures.append(f"kernel error on the console: {bad}")
    if exit_status is None:
        failures.append(f"the VM did not power off within {BOOT_DEADLINE_S:g}s (QEMU killed)")
    elif exit_status != 0:
        failures.append(f"QEMU exited with status {exit_status}")
    return failures, shown


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: guest_qemu_test.py AGENT_BINARY BUILD_GUEST_IMAGE_SH")
    agent, build_image = sys.argv[1], sys.argv[2]
    try:
        kernel_dir = find_kernel_dir()
    except FileNotFoundError as e:
        print(f"FAIL: {e}")
        return 1
    try:
        if not agent or not os.path.isfile(agent):
            raise Skip(f"dsec-agent binary not built ({agent or 'no dsec-agent target'})")
        qemu = shutil.which("qemu-system-x86_64")
        if not qemu:
            raise Skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
        if not shutil.which("mkfs.erofs"):
            raise Skip("mkfs.erofs not installed (apt-get install erofs-utils)")
        if not os.path.isfile("/bin/busybox"):
            raise Skip("/bin/busybox not installed (apt-get install busybox-static)")
    except Skip as e:
        print(f"SKIP: {e}")
        return SKIP

    with open(kernel_dir / "kernelrelease", encoding="ascii") as f:
        release = f.read().strip()
    tmp = tempfile.mkdtemp(prefix="dsec-guest-qemu-")
    try:
        root_image = os.path.join(tmp, "root.erofs")
        run([build_image, agent, root_image])
        marker = "dsec-marker-" + secrets.token_hex(8)
        layer_image = build_layer(tmp, marker)
        command = base64.b64encode(GUEST_COMMAND.strip().encode()).decode()
        cmdline = " ".join([
            "console=ttyS0", "panic=-1",
            "root=/dev/pmem0", "rootfstype=erofs", "rootflags=dax=always", "ro", "rootwait",
            "dsec.layers=/dev/pmem1", "dsec.upper=tmpfs:64",
            f"dsec.run={command}", "dsec.oneshot=1"])
        started = time.monotonic()
        exit_status, lines = boot(qemu, str(kernel_dir / "bzImage"), root_image,
                                  layer_image, cmdline, os.path.join(tmp, "console.log"))
        elapsed = time.monotonic() - started
        failures, shown = check(lines, exit_status, marker, release)
        print(f"kernel {release} from {kernel_dir}; VM ran {elapsed:.1f}s, QEMU exit {exit_status}")
        if failures:
            print("---- console ----")
            print("\n".join(lines))
            print("---- end of console ----")
            for f in failures:
                print("FAIL:", f)
            return 1
        print("asserted console lines:")
        for line in shown:
            print("  " + line)
        print("PASS")
        return 0
    except subprocess.CalledProcessError as e:
        print(f"FAIL: {' '.join(e.cmd)} exited {e.returncode}:\n{e.stdout}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: Apache-2.0
"""A private dsec-vmmd for integration tests and the API bench.

Daemon(tmp) runs $DSEC_VMMD on a socket, state, trajectory and layer-store
directories of its own under tmp; it can be stopped (SIGTERM), killed
(SIGKILL) and started again on the same directories. leaks(ids) lists what a
test left behind on the host: mounts under tmp, cgroup directories and
processes named after the given sandbox ids.
"""

import ctypes
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import libdsec  # noqa: E402

START_TIMEOUT_S = 30
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
FNCALL_LAYERS_SCRIPT = os.path.join(SOURCE_DIR, "sandbox", "fncall", "testdata",
                                    "build_test_layers.sh")


def is_static(path):
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


def missing_prerequisite():
    """The reason the real daemon cannot run here, or None."""
    binary = os.environ.get("DSEC_VMMD")
    if not binary:
        return "DSEC_VMMD is not set (path of the dsec-vmmd daemon binary)"
    if not os.access(binary, os.X_OK):
        return "DSEC_VMMD=%s is missing or not executable" % binary
    if os.geteuid() != 0:
        return "the daemon needs root (namespaces, cgroups, mounts)"
    if not os.path.exists("/bin/busybox") or not is_static("/bin/busybox"):
        return "no static /bin/busybox (apt-get install busybox-static)"
    if not shutil.which("mkfs.erofs"):
        return "no mkfs.erofs (apt-get install erofs-utils)"
    return None


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


def build_fncall_python_layer(out_dir):
    """Builds (offline) the fncall tests' runtime layer with python3.11 and
    bash from the host; returns its path, or raises RuntimeError saying why not."""
    if not os.path.exists(FNCALL_LAYERS_SCRIPT):
        raise RuntimeError("no %s" % FNCALL_LAYERS_SCRIPT)
    r = subprocess.run(["bash", FNCALL_LAYERS_SCRIPT, out_dir], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError("build_test_layers.sh failed (%d): %s" % (r.returncode, r.stderr[-500:]))
    return os.path.join(out_dir, "runtime.erofs")


def _help_text(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return out.stdout + out.stderr


def offers(text, flag):
    return re.search(r"(^|[\s,])%s\b" % re.escape(flag), text, re.M) is not None


DIR_FLAGS = [("--container-state-dir", "containers"), ("--fncall-state-dir", "fncall"),
             ("--trajectory-dir", "trajectory"), ("--store", "layers"),
             ("--snapshot-dir", "snapshots")]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def read_ready_line(pipe, deadline):
    """The daemon's "dsec-vmmd ready" line from its stdout, waiting on the
    pipe until `deadline` (time.monotonic()); None at end of file (it
    exited) or at the deadline."""
    poller = select.poll()
    poller.register(pipe.fileno(), select.POLLIN)
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return None
        chunk = os.read(pipe.fileno(), 4096)
        if not chunk:
            return None
        buf += chunk
        for line in buf.split(b"\n")[:-1]:
            if line.startswith(b"dsec-vmmd ready"):
                return line.decode("utf-8", "replace")


def copy_to_file(pipe, path):
    """Appends what `pipe` carries to `path` until its end of file."""
    with open(path, "ab") as out:
        for chunk in iter(lambda: os.read(pipe.fileno(), 4096), b""):
            out.write(chunk)
            out.flush()


class Daemon:
    """One private daemon under tmp (which the caller creates and removes)."""

    def __init__(self, tmp, binary=None, extra_args=(), tcp_token=None, store=None):
        self.binary = binary or os.environ["DSEC_VMMD"]
        self.tmp = tmp
        self.socket = os.path.join(tmp, "run", "api.sock")
        self.url = None
        self.token = tcp_token
        self.proc = None
        self.log_path = os.path.join(tmp, "daemon.log")
        self.starts = 0
        text = _help_text(self.binary)
        missing = [f for f in ["--socket"] + [f for f, _ in DIR_FLAGS] if not offers(text, f)]
        if missing:
            raise RuntimeError("%s --help lacks %s:\n%s" % (self.binary, ", ".join(missing), text))
        self.cmd = [self.binary, "--socket", self.socket]
        for flag, sub in DIR_FLAGS:
            if flag == "--store" and store is not None:
                self.cmd += [flag, store]  # a shared store (the host's layers)
                continue
            os.makedirs(os.path.join(tmp, sub), mode=0o700, exist_ok=True)
            self.cmd += [flag, os.path.join(tmp, sub)]
        if tcp_token is not None and offers(text, "--listen") and offers(text, "--token-file"):
            token_file = os.path.join(tmp, "token")
            with open(token_file, "w") as f:
                f.write(tcp_token + "\n")
            os.chmod(token_file, 0o600)
            port = free_port()
            self.cmd += ["--listen", "127.0.0.1:%d" % port, "--token-file", token_file]
            self.url = "http://127.0.0.1:%d" % port
        if offers(text, "--fncall-warm-pools"):
            # The tests check that nothing outlives a sandbox; a warm fncall
            # pool would (by design), so these daemons keep none.
            self.cmd += ["--fncall-warm-pools", "0"]
        self.cmd += list(extra_args)
        os.makedirs(os.path.join(tmp, "run"), mode=0o700, exist_ok=True)

    def start(self):
        """Starts the daemon and waits until it is ready; returns /v1/health.

        Ready is an event: dsec-vmmd prints "dsec-vmmd ready ..." on its
        stdout (a pipe here) once it listens, and the pipe's end of file
        says it exited. Its logs go to stderr (the log file); a thread
        copies whatever else stdout carries there."""
        with open(self.log_path, "ab") as log:
            log.write(b"\n=== start %d ===\n" % self.starts)
            log.flush()
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True)
        self.starts += 1
        ready = read_ready_line(self.proc.stdout, time.monotonic() + START_TIMEOUT_S)
        threading.Thread(target=copy_to_file, args=(self.proc.stdout, self.log_path),
                         daemon=True).start()
        if ready is None:
            raise RuntimeError("daemon did not become ready on %s within %ds (exit %s):\n%s"
                               % (self.socket, START_TIMEOUT_S, self.proc.poll(), self.log_tail()))
        client = libdsec.Client(socket_path=self.socket, timeout=30)
        try:
            return client.health()
        finally:
            client.close()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        """SIGKILL, as a crash would: nothing of the daemon's cleanup runs."""
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self):
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def client(self, **kw):
        return libdsec.Client(socket_path=self.socket, **kw)

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def leaks(self, sandbox_ids, settle_s=5.0, max_s=120.0):
        """What is left on the host: mounts under tmp, cgroup dirs and
        processes whose cgroup names one of sandbox_ids. A destroyed
        container sandbox's cgroups and state directory are removed by the
        daemon's own thread just after DELETE answers
        (sandbox/container/init_pool.h), one after another: after thousands
        of deletes on a loaded host that backlog takes a while. So this
        waits until settle_s pass without the remains shrinking (or max_s in
        all); what remains then is a leak."""
        give_up = time.monotonic() + max_s
        deadline = time.monotonic() + settle_s
        left = None
        while True:
            leaks = host_leaks(self.tmp, sandbox_ids)
            n = sum(len(v) for v in leaks.values())
            if left is None or n < left:
                left = n
                deadline = min(give_up, time.monotonic() + settle_s)
            if not leaks or time.monotonic() >= deadline:
                return leaks
            with _RemovalWatch(self.tmp, leaks) as watch:
                watch.wait(deadline - time.monotonic())


_IN_NONBLOCK_CLOEXEC = 0o4000 | 0o2000000
_IN_DELETE_SELF = 0x400


class _RemovalWatch:
    """Waits until something in `leaks` (host_leaks) may be gone: the mount
    table changes (/proc/self/mountinfo polls POLLPRI), a leaked cgroup
    directory is removed (inotify, through libc with ctypes), a leaked
    process exits (its pidfd). Armed after the scan that found `leaks`, so
    it checks once more that each is still there before waiting."""

    def __init__(self, tmp, leaks):
        self._poll = select.poll()
        self._fds = []
        self._gone = False
        # A change of the mount table after this open raises POLLPRI.
        mountinfo = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        self._fds.append(mountinfo)
        self._poll.register(mountinfo, select.POLLPRI | select.POLLERR)
        if leaks.get("mounts") and _mounts_under(tmp) != leaks["mounts"]:
            self._gone = True
        if leaks.get("cgroups"):
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(_IN_NONBLOCK_CLOEXEC)
            if fd >= 0:
                self._fds.append(fd)
                self._poll.register(fd, select.POLLIN)
                for d in leaks["cgroups"]:
                    libc.inotify_add_watch(fd, d.encode(), _IN_DELETE_SELF)
            self._gone |= not all(os.path.isdir(d) for d in leaks["cgroups"])
        for pid in leaks.get("processes", []):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._gone = True
                continue
            self._fds.append(fd)
            self._poll.register(fd, select.POLLIN)

    def wait(self, timeout_s):
        if not self._gone and timeout_s > 0:
            self._poll.poll(timeout_s * 1000)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for fd in self._fds:
            os.close(fd)


def _mounts_under(root):
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp == root or mp.startswith(root.rstrip("/") + "/"):
                out.append(mp)
    return out


def _cgroup_dirs_naming(ids, max_depth=4):
    found = []
    if not ids:
        return found
    base = "/sys/fs/cgroup"
    for top in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        start = os.path.join(base, top)
        if os.path.islink(start) or not os.path.isdir(start):
            continue
        for dirpath, dirnames, _ in os.walk(start):
            depth = dirpath[len(start):].count("/")
            if depth >= max_depth:
                dirnames[:] = []
            for d in dirnames:
                if any(i in d for i in ids):
                    found.append(os.path.join(dirpath, d))
    return found


def processes_naming(ids):
    found = []
    if not ids:
        return found
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % pid) as f:
                cg = f.read()
        except OSError:
            continue
        if any(i in cg for i in ids):
            found.append(int(pid))
    return found


def wait_exited(pids, timeout_s):
    """Waits until every process of `pids` has exited (their pidfds become
    readable), for up to timeout_s; True when all have."""
    poller = select.poll()
    fds = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                continue  # gone already
            poller.register(fds[-1], select.POLLIN)
        deadline = time.monotonic() + timeout_s
        left = len(fds)
        while left > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for fd, _ in poller.poll(remaining * 1000):
                poller.unregister(fd)
                left -= 1
        return True
    finally:
        for fd in fds:
            os.close(fd)


def host_leaks(tmp, sandbox_ids):
    ids = set(sandbox_ids)
    leaks = {}
    m = _mounts_under(tmp)
    if m:
        leaks["mounts"] = m
    c = _cgroup_dirs_naming(ids)
    if c:
        leaks["cgroups"] = c
    p = processes_naming(ids)
    if p:
        leaks["processes"] = p
    return leaks

#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The nested test bed: runs a command inside L1, a Debian kernel booted by
QEMU TCG on a software AMD CPU with SVM, whose kvm_amd gives a /dev/kvm with
hardware-virtualisation semantics (this host's own /dev/kvm is PVM and cannot
run a Linux guest: /work/shared/HOST.md). See README.md.

  bed.py prepare              build (or find) the cached L1 image, print its dir
  bed.py run [opts] -- CMD... run CMD in L1; exit with CMD's status

run: 77 = skipped (one "SKIP: reason" line on stderr), 124 = the deadline
passed (QEMU killed), 125 = the bed failed (L1 recorded no status), 2 = bad
usage; otherwise CMD's status. CMD's stdout and stderr stream to ours as it
runs; L1's console goes to a log whose tail is printed when something failed.
"""
import argparse
import ctypes
import json
import marshal
import fcntl
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.realpath(os.path.join(HERE, "..", ".."))  # the project tree this bed is part of
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import bed_image  # noqa: E402
import bed_plan  # noqa: E402

SKIP, TIMED_OUT, BED_FAILED, USAGE = 77, 124, 125, 2
DEFAULT_CPU = "EPYC"
DEFAULT_TIMEOUT_S = 600
HOSTNAME = "dsec-nested"
KERNEL_CMDLINE = "console=ttyS0 panic=-1 mitigations=off quiet"
# Host variables that reach CMD unless --env overrides them.
PASSED_ENV_PREFIXES = ("DSEC_", "GTEST_")
PORTS = ("dsec.ctl", "dsec.stdout", "dsec.stderr")


def log(msg):
    print("nested-bed: " + msg, file=sys.stderr, flush=True)


def skip(reason):
    print("SKIP: " + " ".join(reason.split()), file=sys.stderr, flush=True)
    return SKIP


# --- host checks ----------------------------------------------------------

def cpu_model(cpu):
    """QMP's CpuModelInfo for a -cpu value such as "EPYC" or "qemu64,+svm,npt=on"."""
    name, *feats = cpu.split(",")
    props = {}
    for f in feats:
        if f.startswith(("+", "-")):
            props[f[1:]] = f[0] == "+"
        elif "=" in f:
            k, v = f.split("=", 1)
            props[k] = v in ("on", "true", "yes") if v in ("on", "off", "true", "false", "yes", "no") else v
    model = {"name": name}
    if props:
        model["props"] = props
    return model


def svm_missing(qemu, cpu):
    """Why this QEMU's TCG gives the CPU model no SVM, or "" if it does
    (query-cpu-model-expansion on a machine-less QEMU)."""
    cmds = [{"execute": "qmp_capabilities"},
            {"execute": "query-cpu-model-expansion", "arguments": {"type": "full", "model": cpu_model(cpu)}},
            {"execute": "quit"}]
    try:
        r = subprocess.run([qemu, "-M", "none", "-accel", "tcg", "-nodefaults", "-display", "none",
                            "-qmp", "stdio"], input="".join(json.dumps(c) + "\n" for c in cmds),
                           capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return "QEMU's CPU model probe did not answer within 60 s"
    for line in r.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "error" in msg:
            return "QEMU has no CPU model %s: %s" % (cpu, msg["error"].get("desc", msg["error"]))
        ret = msg.get("return")
        if isinstance(ret, dict) and "model" in ret:
            if ret["model"].get("props", {}).get("svm") is True:
                return ""
            return "CPU model %s has no SVM under QEMU TCG" % cpu
    return "QEMU's CPU model probe failed: %s" % (r.stderr.strip()[-300:] or "no answer")


# --- the run --------------------------------------------------------------

def list_dir(path):
    """{name: "dir" | "file" | "symlink:<target>"} of a host directory."""
    out = {}
    for e in os.scandir(path):
        if e.is_symlink():
            out[e.name] = "symlink:" + os.readlink(e.path)
        elif e.is_dir():
            out[e.name] = "dir"
        else:
            out[e.name] = "file"
    return out


def make_plan(manifest, mountinfo, share_args, binds=(), copies=(), scratch=True, no_v1=(),
              overlays=()):
    steps = bed_plan.root_plan(list_dir("/"), list_dir("/var") if os.path.isdir("/var") else {},
                               extra_ro=share_args, extra_overlay=overlays, state_exists=os.path.isdir)
    steps += bed_plan.bind_plan(binds, copies) + bed_plan.dev_plan() + bed_plan.sys_plan(mountinfo, no_v1)
    return {"steps": steps, "hostname": HOSTNAME, "cmd": bed_plan.RESULTS_MOUNT + "/cmd.sh",
            "scratch": scratch, "modules": {"tree": manifest["tree"], "extra": manifest["extra_modules"]}}


def make_scratch(path, gib):
    """A sparse ext4 image for L1's writable places (bed_plan.SCRATCH_MOUNT):
    made here, natively, in a fraction of a second; no journal (thrown away
    after the run). False if there is no mkfs.ext4."""
    mkfs = shutil.which("mkfs.ext4", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if mkfs is None:
        return False
    with open(path, "wb") as f:
        f.truncate(gib << 30)
    r = subprocess.run([mkfs, "-q", "-F", "-O", "^has_journal", "-m", "0", "-E",
                        "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", bed_plan.SCRATCH_SERIAL, path],
                       capture_output=True, text=True, check=False, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("mkfs.ext4 %s: %s" % (path, r.stderr.strip()))
    return True


def command_env(host_env, pairs):
    env = dict(bed_plan.DEFAULT_ENV)
    env.update({k: v for k, v in host_env.items() if k.startswith(PASSED_ENV_PREFIXES)})
    for p in pairs:
        if "=" in p:
            k, v = p.split("=", 1)
        elif p in host_env:
            k, v = p, host_env[p]
        else:
            raise ValueError("--env %s: not set here" % p)
        env[bed_plan.check_env_name(k)] = v
    env["DSEC_NESTED"] = "1"
    env["DSEC_NESTED_RESULTS"] = bed_plan.RESULTS_MOUNT
    return env


def qemu_argv(qemu, manifest, tmp, share, cpu, mem, smp, scratch=None, tcg_thread="multi"):
    a = [qemu, "-accel", "tcg,thread=%s" % tcg_thread, "-cpu", cpu, "-M", "pc", "-m", str(mem), "-smp", str(smp),
         "-nographic", "-no-reboot", "-nodefaults", "-monitor", "none",
         # For the report on a run that passes its deadline (Run.stuck_report).
         "-qmp", "unix:%s/qmp.sock,server=on,wait=off" % tmp,
         "-kernel", manifest["kernel"], "-initrd", manifest["initrd"], "-append", KERNEL_CMDLINE,
         "-chardev", "file,id=con,path=%s/console.log" % tmp, "-serial", "chardev:con",
         "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
         "-virtfs", "local,path=%s,mount_tag=results,security_model=none" % share,
         "-device", "virtio-serial-pci,id=vser"]
    if scratch:
        # cache=unsafe: the disk is thrown away after the run.
        a += ["-drive", "file=%s,format=raw,if=none,id=scratch,cache=unsafe,discard=unmap" % scratch,
              "-device", "virtio-blk-pci,drive=scratch,serial=%s" % bed_plan.SCRATCH_SERIAL]
    for i, name in enumerate(PORTS):
        a += ["-chardev", "socket,id=p%d,path=%s/%s.sock" % (i, tmp, name),
              "-device", "virtserialport,bus=vser.0,chardev=p%d,name=%s" % (i, name)]
    return a


def tail(path, lines=40):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no %s)" % os.path.basename(path)
    text = re.sub(r"\x1b(\[[0-9;?]*[A-Za-z]|c)", "", text)  # SeaBIOS's screen control
    return "\n".join(text.splitlines()[-lines:])


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__("signal %d" % signum)
        self.signum = signum


def _on_signal(signum, _frame):
    raise Interrupted(signum)


def _pdeathsig():
    # QEMU dies with us even if we are SIGKILLed (a ctest timeout).
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Kicker(threading.Thread):
    """Works around a lost-interrupt bug of QEMU 7.2's TCG with SVM (Debian
    12's QEMU): now and then L1's vCPU halts with interrupts enabled and its
    timer vector pending in the local APIC's IRR, yet the CPU never takes it,
    and L1 stops for good (seen once in three runs of the microvm SDK test;
    an NMI does not wake it; any new interrupt does, since delivering one
    re-evaluates the APIC). So every `period_s` this sends L1 one Shift key
    press and release through QMP: an i8042 interrupt that L1 ignores, which
    bounds such a stop to one period. README.md, "Known problems"."""

    def __init__(self, sock_path, period_s):
        super().__init__(daemon=True)
        self.sock_path, self.period_s = sock_path, period_s
        self.done = threading.Event()
        self.kicks = 0

    def run(self):
        key = [{"type": "key", "data": {"down": down, "key": {"type": "qcode", "data": "shift"}}}
               for down in (True, False)]
        while not self.done.is_set():
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(10)
                    s.connect(self.sock_path)
                    f = s.makefile("rwb")
                    f.readline()  # the greeting
                    f.write(b'{"execute": "qmp_capabilities"}\n')
                    f.flush()
                    self._answer(f)
                    while not self.done.wait(self.period_s):
                        f.write((json.dumps({"execute": "input-send-event", "arguments": {"events": key}})
                                 + "\n").encode())
                        f.flush()
                        self._answer(f)
                        self.kicks += 1
            except (OSError, ValueError):
                # QEMU not listening yet, or gone: try again a period later.
                self.done.wait(self.period_s)

    @staticmethod
    def _answer(f):
        while True:
            line = f.readline()
            if not line:
                raise OSError("QMP closed")
            r = json.loads(line)
            if "return" in r or "error" in r:
                return r

    def stop(self):
        self.done.set()
        self.join(timeout=15)


class Run:
    """One L1 boot: QEMU, its temp dir, the relay of CMD's output."""

    def __init__(self, args, manifest, tmp):
        self.args, self.manifest, self.tmp = args, manifest, tmp
        self.share = os.path.join(tmp, "share")
        self.events = []  # (host s since QEMU start, event, L1 uptime, detail)
        self.ctl_buf = b""
        self.qemu = None
        self.start = None
        self.scratch = None  # the ext4 image, if made
        self.kicker = None
        self.kicks = 0  # interrupts the kicker sent

    def on_ctl(self, data):
        self.ctl_buf += data
        while b"\n" in self.ctl_buf:
            line, self.ctl_buf = self.ctl_buf.split(b"\n", 1)
            f = line.decode(errors="replace").split(" ", 2)
            self.events.append((time.monotonic() - self.start, f[0], f[1] if len(f) > 1 else "",
                                f[2] if len(f) > 2 else ""))
            if f[0] == "warn" or self.args.verbose:
                log("L1: " + line.decode(errors="replace"))

    def boot(self):
        """Runs QEMU to its end or the deadline; True if it ended."""
        listeners, sel = {}, selectors.DefaultSelector()
        for name in PORTS:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(os.path.join(self.tmp, name + ".sock"))
            s.listen(1)
            s.setblocking(False)
            listeners[name] = s
            sel.register(s, selectors.EVENT_READ, ("listen", name))
        sinks = {"dsec.stdout": sys.stdout.buffer, "dsec.stderr": sys.stderr.buffer}
        argv = qemu_argv(self.args.qemu, self.manifest, self.tmp, self.share, self.args.cpu,
                         self.args.mem, self.args.smp, self.scratch, self.args.tcg_thread)
        if self.args.verbose:
            log("starting " + " ".join(argv))
        with open(os.path.join(self.tmp, "qemu.log"), "wb") as qlog:
            self.start = time.monotonic()
            self.qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog, stderr=qlog,
                                         preexec_fn=_pdeathsig)
        pidfd = os.pidfd_open(self.qemu.pid)
        if self.args.kick_s > 0:
            self.kicker = Kicker(os.path.join(self.tmp, "qmp.sock"), self.args.kick_s)
            self.kicker.start()
        sel.register(pidfd, selectors.EVENT_READ, ("exit", None))
        deadline = self.start + self.args.timeout
        conns, exited = 0, False
        try:
            while True:
                now = time.monotonic()
                if exited and conns == 0:
                    return True
                if now >= deadline:
                    return False
                ready = sel.select(deadline - now)
                if exited and not ready:
                    return True  # QEMU is gone; nothing more will come
                for key, _ in ready:
                    kind, name = key.data
                    if kind == "exit":
                        sel.unregister(pidfd)
                        exited = True
                        # What QEMU wrote before it exited is in the sockets;
                        # read it, but do not wait for more than a moment.
                        deadline = min(deadline, time.monotonic() + 5)
                    elif kind == "listen":
                        try:
                            c, _ = key.fileobj.accept()
                        except BlockingIOError:
                            continue
                        sel.register(c, selectors.EVENT_READ, ("conn", name))
                        conns += 1
                    else:
                        data = key.fileobj.recv(65536)
                        if not data:
                            sel.unregister(key.fileobj)
                            key.fileobj.close()
                            conns -= 1
                        elif name == "dsec.ctl":
                            self.on_ctl(data)
                        else:
                            sinks[name].write(data)
                            sinks[name].flush()
        finally:
            for key in list(sel.get_map().values()):
                if key.fileobj is not pidfd:
                    key.fileobj.close()
            os.close(pidfd)
            sel.close()
            self.stop_kicker()

    def stop_kicker(self):
        """Ends the kicker (QMP takes one client at a time: before any other
        QMP use)."""
        if self.kicker is not None:
            self.kicker.stop()
            self.kicks = self.kicker.kicks
            self.kicker = None

    def qemu_cpu_s(self):
        """QEMU's CPU time (all threads) so far, in seconds."""
        with open("/proc/%d/stat" % self.qemu.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stuck_report(self, gap_s=2.0):
        """Where L1's vCPUs are, twice gap_s apart, and whether QEMU spins
        meanwhile: tells an L1 (or L2) stuck in a loop from one waiting on
        I/O, and an emulator that no longer leaves L2 from a guest hang."""
        lines = []
        self.stop_kicker()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(os.path.join(self.tmp, "qmp.sock"))
                f = s.makefile("rwb")
                f.readline()  # the greeting

                def call(cmd, **args):
                    f.write((json.dumps({"execute": cmd, "arguments": args}) + "\n").encode())
                    f.flush()
                    while True:
                        r = json.loads(f.readline())
                        if "return" in r or "error" in r:
                            return r.get("return", r.get("error"))

                call("qmp_capabilities")
                cpu0 = self.qemu_cpu_s()
                for i in range(2):
                    if i:
                        time.sleep(gap_s)
                    regs = call("human-monitor-command", **{"command-line": "info registers -a"})
                    keep = [ln.strip() for ln in str(regs).splitlines()
                            if ln.startswith(("CPU#", "RIP=", "CS =", "EFL=")) or "HLT=" in ln]
                    lines.append("sample %d: %s" % (i + 1, " | ".join(keep)))
                spun = self.qemu_cpu_s() - cpu0
                lines.append("QEMU used %.1f s of CPU in %.1f s (%s)" % (
                    spun, gap_s, "spinning" if spun > gap_s / 2 else "mostly idle: L1 is waiting"))
        except (OSError, ValueError) as e:
            lines.append("no answer from QEMU's QMP socket: %s" % e)
        return "\n".join(lines)

    def stop(self):
        if self.qemu is not None and self.qemu.poll() is None:
            self.qemu.kill()
            self.qemu.wait()

    def last_event(self):
        return self.events[-1][1] if self.events else "before stage 2 (firmware, kernel, stage 1)"

    def timings(self):
        parts = ["%s %.1f s (L1 %s s)" % (e, t, up) for t, e, up, _ in self.events if e != "warn"]
        if self.qemu is not None and self.qemu.returncode is not None:
            parts.append("QEMU exit %.1f s" % self.end)
        parts.append("%d kicks" % self.kicks)
        return "timings since QEMU start: " + ", ".join(parts)

    def result(self, ended):
        self.end = time.monotonic() - self.start
        console = os.path.join(self.tmp, "console.log")
        if not ended:
            report = self.stuck_report()
            self.stop()
            log("deadline of %d s passed (last L1 stage: %s); QEMU killed" % (self.args.timeout,
                                                                             self.last_event()))
            log("what L1 was doing at the deadline:\n" + report)
            log("L1 console, last lines:\n" + tail(console))
            return TIMED_OUT
        if self.args.verbose:
            log(self.timings())
        def read(name):
            try:
                with open(os.path.join(self.share, name)) as f:
                    return f.read()
            except FileNotFoundError:
                return None
        if (why := read("skip")) is not None:
            return skip(why)
        if (status := read("status")) is not None:
            code = int(status.strip())
            if code not in (0, SKIP):
                log("command exited with status %d; L1 console, last lines:\n%s" % (code, tail(console, 20)))
            return code
        if (err := read("error")) is not None:
            log("L1 stage 2 failed:\n" + err.rstrip())
        else:
            log("L1 ended without a status (QEMU exit status %s, last L1 stage: %s)"
                % (self.qemu.returncode, self.last_event()))
        log("L1 console, last lines:\n" + tail(console))
        log("QEMU log, last lines:\n" + tail(os.path.join(self.tmp, "qemu.log"), 10))
        return BED_FAILED

    def keep_logs(self, where):
        os.makedirs(where, exist_ok=True)
        for name in ("console.log", "qemu.log", "share/plan.json", "share/cmd.sh"):
            if os.path.exists(os.path.join(self.tmp, name)):
                shutil.copy(os.path.join(self.tmp, name), os.path.join(where, os.path.basename(name)))
        with open(os.path.join(where, "events.txt"), "w") as f:
            for t, e, up, d in self.events:
                f.write("%.3f %s %s %s\n" % (t, e, up, d))


def plan_for(args, manifest, binds, copies, scratch):
    with open(os.path.join(manifest["tree"], "boot", "config-" + manifest["kver"])) as f:
        no_v1 = bed_plan.v1_missing(f.read())
    with open("/proc/self/mountinfo") as f:
        mountinfo = f.read()
    if args.verbose and any(m[1] == "cgroup" and set(m[3].split(",")) & set(no_v1)
                            for m in bed_plan.parse_mountinfo(mountinfo)):
        log("L1's kernel (%s) has no cgroup v1 %s: in L1 they are in the v2 hierarchy only"
            % (manifest["kver"], ", ".join(no_v1)))
    return make_plan(manifest, mountinfo, args.share, binds, copies, scratch is not None, no_v1,
                     args.overlays)


def write_share(share, manifest, script, plan):
    """What L1 reads from the results share."""
    os.mkdir(share)
    with open(os.path.join(share, "cmd.sh"), "w") as f:
        f.write(script)
    with open(os.path.join(share, "extra-modules"), "w") as f:  # for l1_stage1.sh
        f.write("%s\n%s\n" % (manifest["tree"], " ".join(manifest["extra_modules"])))
    with open(os.path.join(share, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    with open(os.path.join(share, "plan.marshal"), "wb") as f:
        marshal.dump(plan, f, 4)  # stage 2 reads this: marshal needs no import


def host_kvm_usable():
    """A description of the host's /dev/kvm if a VM can be created on it, else ""."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        kvm_create_vm = 0xAE01  # _IO(KVMIO, 0x01)
        vm = fcntl.ioctl(fd, kvm_create_vm, 0)
        os.close(vm)
        return "KVM_CREATE_VM works"
    except OSError:
        return ""
    finally:
        os.close(fd)


def cmd_run(args):
    if not args.command:
        log("run: no command (bed.py run [options] -- CMD ARGS...)")
        return USAGE
    if args.unless_host_kvm and (why := host_kvm_usable()):
        return skip("this host has a usable /dev/kvm (%s): the command runs on the host instead" % why)
    args.qemu = shutil.which("qemu-system-x86_64")
    if args.qemu is None:
        return skip("qemu-system-x86_64 not found (apt-get install qemu-system-x86)")
    cwd = os.path.realpath(os.getcwd())
    args.overlays = bed_plan.checkout_overlays([cwd, CHECKOUT])
    if args.verbose and args.overlays:
        log("also shared with a writable upper (the current directory or the checkout is there): "
            + ", ".join("/" + n for n in args.overlays))
    if (why := bed_plan.unshared_reason(cwd, args.overlays)):
        log("run: the current directory %s does not exist in L1: %s" % (cwd, why))
        return USAGE
    try:
        env = command_env(os.environ, args.env)
        script = bed_plan.command_script(args.command, env, cwd)
        binds = [bed_plan.parse_bind(b, os.path.isdir) for b in args.bind]
        copies = [bed_plan.parse_bind(b, os.path.isdir, "--copy") for b in args.copy]
    except ValueError as e:
        log("run: %s" % e)
        return USAGE
    if not args.no_svm_probe and (why := svm_missing(args.qemu, args.cpu)):
        return skip(why)
    try:
        manifest = bed_image.prepare(args.flavour, args.series, log=log if args.verbose else lambda s: None)
    except bed_image.Unavailable as e:
        return skip("no L1 image: %s" % e)
    tmp = tempfile.mkdtemp(prefix="dsec-nested.")
    run = Run(args, manifest, tmp)
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if args.disk > 0:
            path = os.path.join(tmp, "scratch.ext4")
            if make_scratch(path, args.disk):
                run.scratch = path
            else:
                log("no mkfs.ext4 (e2fsprogs): /tmp and the uppers in L1 are tmpfs")
        write_share(run.share, manifest, script, plan_for(args, manifest, binds, copies, run.scratch))
        code = run.result(run.boot())
        if args.log_dir:
            run.keep_logs(args.log_dir)
        return code
    except Interrupted as e:
        log("interrupted by signal %d; QEMU stopped" % e.signum)
        return 128 + e.signum
    finally:
        run.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        for s, h in old.items():
            signal.signal(s, h)


def cmd_prepare(args):
    try:
        m = bed_image.prepare(args.flavour, args.series, log=log)
    except bed_image.Unavailable as e:
        return skip("no L1 image: %s" % e)
    print(m["dir"])
    return 0


def main(argv):
    p = argparse.ArgumentParser(prog="bed.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--flavour", default=os.environ.get("DSEC_NESTED_FLAVOUR", bed_image.DEFAULT_FLAVOUR),
                   help="Debian kernel flavour of L1 (linux-image-<flavour>; default %(default)s)")
    p.add_argument("--series", default=os.environ.get("DSEC_NESTED_SERIES", bed_image.DEFAULT_SERIES),
                   help="kernel series of L1, newest ABI (default %(default)s; 'meta': the flavour's "
                        "metapackage, bookworm's 6.1)")
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("prepare", help="build or find the cached L1 image; print its directory")
    r = sub.add_parser("run", help="run a command in L1")
    r.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="seconds, boot included")
    r.add_argument("--mem", type=int, default=4096, help="L1 memory in MiB")
    # One vCPU: with two, TCG's handling of cross-modifying code (the L2
    # kernel patching its text while another L1 vCPU runs it) gave an L2
    # int3 Oops in some runs; one L1 vCPU also lets two beds run at once.
    r.add_argument("--smp", type=int, default=int(os.environ.get("DSEC_NESTED_SMP", "1")),
                   help="L1 vCPUs (default %(default)s; DSEC_NESTED_SMP)")
    r.add_argument("--tcg-thread", choices=("multi", "single"),
                   default=os.environ.get("DSEC_NESTED_TCG_THREAD", "multi"),
                   help="QEMU TCG: one host thread per L1 vCPU (multi) or one for all (single)")
    r.add_argument("--cpu", default=os.environ.get("DSEC_NESTED_CPU", DEFAULT_CPU),
                   help="QEMU CPU model with SVM (default %(default)s)")
    r.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="set K in CMD's environment (K alone: this process's value)")
    r.add_argument("--share", action="append", default=[], metavar="NAME",
                   help="also share the host's /NAME read-only")
    r.add_argument("--bind", action="append", default=[], metavar="SRC:DST",
                   help="show the host's directory SRC at DST in L1 (writes stay in L1)")
    r.add_argument("--copy", action="append", default=[], metavar="SRC:DST",
                   help="copy the host's directory SRC to DST in L1, on the scratch disk (EROFS "
                        "images in it can be mounted)")
    r.add_argument("--disk", type=int, default=16, metavar="GiB",
                   help="size of L1's sparse ext4 scratch disk (/tmp, /var/tmp, overlay uppers; "
                        "0: tmpfs instead)")
    r.add_argument("--log-dir", help="copy L1's console log, QEMU's log and the events here")
    r.add_argument("--no-svm-probe", action="store_true",
                   help="boot even if the CPU model shows no SVM (tests L1's own /dev/kvm check)")
    r.add_argument("-v", "--verbose", action="store_true", help="L1 events and timings on stderr")
    r.add_argument("--kick-s", type=float, default=float(os.environ.get("DSEC_NESTED_KICK_S", "1")),
                   help="seconds between the interrupts that work around QEMU TCG's lost-interrupt "
                        "bug (class Kicker; default %(default)s, 0: none)")
    r.add_argument("--unless-host-kvm", action="store_true",
                   help="skip (77) when the host itself can create a KVM VM: for tests that run on the "
                        "host where it has /dev/kvm and in L1 where it has none")
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.verb == "prepare":
        return cmd_prepare(args)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

# SPDX-License-Identifier: Apache-2.0
"""Stage 2 of L1's init: PID 1 in L1's tmpfs root, run by the host's python3
(-I -S: standard library only) after l1_stage1.sh switched root.

It mounts the run's ext4 scratch disk (or a tmpfs without one), carries out
the plan the host wrote to the results share (plan.marshal, from
bed_plan.py; plan.json beside it is the same for people): the rest of the
root (read-only binds and overlays of the host's directories, fresh
directories, copies), /dev extras, the host's cgroup hierarchies; waits for
the extra modules (stage 1 started their modprobe); checks
/dev/kvm; sets the hostname and brings up lo; then runs cmd.sh with its
stdout and stderr relayed to the virtio-serial ports dsec.stdout and
dsec.stderr (through pipes: a virtio port can be opened only once, so a
command opening /dev/stderr itself would fail on the port), writes its exit
status to the share, syncs and powers off.

Progress goes to the port dsec.ctl as lines "<event> <uptime> [detail]", for
the host's timings and its timeout message. Any failure is written to
results/error (the host reports it), a missing /dev/kvm to results/skip.
"""
# Imports are few and cheap on purpose: under TCG, python3's start in L1
# costs ~0.3 s and json/re, socket and traceback would add ~0.5 s more, so
# the plan comes in marshal format and errors import traceback late.
import ctypes
import fcntl
import marshal
import os
import select
import signal
import struct
import sys

BED_DIR = "/run/nested-bed"          # bed_plan.BED_DIR
HOST = BED_DIR + "/host"             # bed_plan.HOST_MOUNT
RESULTS = BED_DIR + "/results"       # bed_plan.RESULTS_MOUNT
SCRATCH = BED_DIR + "/scratch"       # bed_plan.SCRATCH_MOUNT
SCRATCH_SERIAL = "nested-scratch"    # bed_plan.SCRATCH_SERIAL
UPPER = SCRATCH + "/upper"           # overlay uppers (on the disk or a tmpfs)

MS = {"rdonly": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "remount": 32, "bind": 4096, "move": 8192,
      "rec": 16384}
MNT_DETACH = 2
RB_POWER_OFF = 0x4321FEDC
RELAY_GRACE_S = 5.0  # output still open after the command exited (a daemon it left)

libc = ctypes.CDLL(None, use_errno=True)
ctl = None


def uptime():
    with open("/proc/uptime") as f:
        return f.read().split()[0]


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]  # a virtio port takes at most 32 KiB per write


def event(name, detail=""):
    line = "%s %s %s" % (name, uptime(), detail)
    print("nested-bed stage2: " + line, flush=True)
    if ctl is not None:
        write_all(ctl, (line.replace("\n", " ") + "\n").encode())


def mount(source, target, fstype, flags=0, data=""):
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                  ctypes.c_ulong(flags), data.encode() if data else None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "mount %s on %s (%s %s): %s" % (source, target, fstype, data, os.strerror(e)))


def flag_bits(names):
    bits = 0
    for n in names:
        bits |= MS[n]
    return bits


def bind(src, dst, ro):
    mount(src, dst, "", MS["bind"])
    if ro:
        mount("", dst, "", MS["remount"] | MS["bind"] | MS["rdonly"])


def scratch_dir(name, mode):
    d = os.path.join(SCRATCH, name)
    os.makedirs(d)
    os.chmod(d, mode)
    return d


def run_step(s, index):
    op, path = s["op"], s["path"]
    if op == "mkdir":
        if not os.path.isdir(path):  # sysfs's own directories cannot be chmod-ed
            os.makedirs(path)
            os.chmod(path, s["mode"])
    elif op == "symlink":
        os.symlink(s["target"], path)
    elif op == "tmpfs":
        mount("tmpfs", path, "tmpfs", MS["nosuid"] | MS["nodev"], "mode=%o" % s["mode"])
    elif op == "bind":
        bind(HOST + s["src"], path, True)
    elif op == "scratch":
        bind(scratch_dir("%d" % index, s["mode"]), path, False)
    elif op == "copy":
        d = scratch_dir("%d" % index, os.stat(HOST + s["src"]).st_mode & 0o7777)
        pid = os.spawnv(os.P_NOWAIT, "/bin/cp", ["cp", "-a", "--", HOST + s["src"] + "/.", d])
        if os.waitpid(pid, 0)[1] != 0:
            raise OSError(0, "cp -a %s failed" % s["src"])
        bind(d, path, False)
        event("copied", s["src"])
    elif op == "overlay":
        d = "%s/%d" % (UPPER, index)
        os.makedirs(d + "/upper")
        os.makedirs(d + "/work")
        st = os.stat(HOST + s["src"])
        os.chmod(d + "/upper", st.st_mode & 0o7777)
        try:
            mount("overlay", path, "overlay", 0,
                  "lowerdir=%s,upperdir=%s/upper,workdir=%s/work" % (HOST + s["src"], d, d))
        except OSError as e:
            event("warn", "%s; %s read-only instead" % (e.strerror, path))
            bind(HOST + s["src"], path, True)
    elif op == "mount":
        mount(s["source"], path, s["fstype"], flag_bits(s.get("flags", [])), s.get("data", ""))
    else:
        raise ValueError("unknown step %r" % op)


def scratch_disk():
    """/dev/vdX whose virtio-blk serial is SCRATCH_SERIAL, or None."""
    for d in sorted(os.listdir("/sys/block")):
        try:
            with open("/sys/block/%s/serial" % d) as f:
                if f.read().strip() == SCRATCH_SERIAL:
                    return "/dev/" + d
        except OSError:
            pass
    return None


def build_root(plan):
    os.makedirs(SCRATCH)
    disk = scratch_disk() if plan["scratch"] else None
    if disk:
        mount(disk, SCRATCH, "ext4", MS["nodev"], "")
    else:
        if plan["scratch"]:
            event("warn", "no scratch disk; /tmp and the uppers are tmpfs")
        mount("tmpfs", SCRATCH, "tmpfs", MS["nosuid"] | MS["nodev"], "mode=0755")
    os.makedirs(UPPER)
    for i, s in enumerate(plan["steps"]):
        try:
            run_step(s, i)
        except OSError as e:
            if not s.get("optional"):
                raise
            event("warn", "%s: %s" % (s["path"], e.strerror or e))
            if s["op"] == "mount":
                # No empty directory that looks like a hierarchy L1 lacks.
                try:
                    os.rmdir(s["path"])
                except OSError:
                    pass
def load_modules(plan):
    """Waits for the extra modules stage 1 started loading; points the
    kernel's module autoloading (fs-*, rtnl-link-*, ...) at the package."""
    m = plan["modules"]
    wrapper = BED_DIR + "/modprobe"
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec /sbin/modprobe -d %s \"$@\"\n" % m["tree"])
    os.chmod(wrapper, 0o755)
    with open("/proc/sys/kernel/modprobe", "w") as f:
        f.write(wrapper)
    try:
        with open(BED_DIR + "/extra-modules.pid") as f:
            pid = int(f.read())
    except FileNotFoundError:
        pid = None
    if pid is not None:
        _, st = os.waitpid(pid, 0)  # stage 1's child, hence PID 1's
        if st != 0:
            event("warn", "modprobe -a %s: status %d" % (" ".join(m["extra"]), os.waitstatus_to_exitcode(st)))
    # Nothing below needs the whole host root; the binds keep it alive.
    libc.umount2(HOST.encode(), MNT_DETACH)
    os.rmdir(HOST)


def kmsg_lines(words):
    out = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                rec = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten; go on
                continue
            msg = rec.split(";", 1)[-1].strip()
            if any(w in msg.lower() for w in words) and msg not in out:
                out.append(msg)
    finally:
        os.close(fd)
    return out


def net_up(name):
    s = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    if s < 0:
        raise OSError(ctypes.get_errno(), "socket")
    try:
        req = struct.pack("16sH14x", name.encode(), 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, req))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", name.encode(), flags | 1))  # SIOCSIFFLAGS, IFF_UP
    finally:
        os.close(s)


def set_hostname(name):
    b = name.encode()
    if libc.sethostname(b, len(b)) != 0:
        raise OSError(ctypes.get_errno(), "sethostname")


def port(name):
    base = "/sys/class/virtio-ports"
    for d in sorted(os.listdir(base)):
        with open(os.path.join(base, d, "name")) as f:
            if f.read().strip() == name:
                return "/dev/" + d
    raise FileNotFoundError("no virtio-serial port %s" % name)


def write_result(name, text):
    path = os.path.join(RESULTS, name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)


def run_command(cmd):
    """Runs /bin/sh cmd, relays its output; its exit status (128+N for signal N)."""
    outs = {}
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    outs[out_r] = os.open(port("dsec.stdout"), os.O_WRONLY)
    outs[err_r] = os.open(port("dsec.stderr"), os.O_WRONLY)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pid = os.posix_spawn("/bin/sh", ["/bin/sh", cmd], {}, setsid=True, file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)])
    os.close(out_w)
    os.close(err_w)
    status, exited_at = None, None
    poll = select.poll()
    for fd in list(outs) + [wake_r]:
        poll.register(fd, select.POLLIN)
    while outs:
        timeout = None
        if status is not None:
            left = exited_at + RELAY_GRACE_S - float(uptime())
            if left <= 0:
                event("warn", "command output still open %.0f s after it exited; stopped relaying"
                      % RELAY_GRACE_S)
                break
            timeout = left * 1000
        for fd, _ in poll.poll(timeout):
            if fd == wake_r:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
                continue
            data = os.read(fd, 65536)
            if data:
                write_all(outs[fd], data)  # a blocking port write returns once the host has it
            else:
                poll.unregister(fd)
                os.close(outs.pop(fd))
                os.close(fd)
        # PID 1 reaps orphans too; the command's own status is kept.
        while True:
            try:
                p, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if p == 0:
                break
            if p == pid:
                code = os.waitstatus_to_exitcode(st)
                status, exited_at = (128 - code if code < 0 else code), float(uptime())
    while status is None:
        p, st = os.waitpid(-1, 0)
        if p == pid:
            code = os.waitstatus_to_exitcode(st)
            status = 128 - code if code < 0 else code
    return status


def main():
    global ctl
    os.environ.clear()
    os.environ["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    with open(os.path.join(RESULTS, "plan.marshal"), "rb") as f:
        plan = marshal.load(f)
    ctl = os.open(port("dsec.ctl"), os.O_WRONLY)
    event("stage2")
    build_root(plan)
    event("root")
    load_modules(plan)
    event("modules")
    if not os.path.exists("/dev/kvm"):
        why = "; ".join(kmsg_lines(("kvm", "svm"))[-4:]) or "no kvm messages in dmesg"
        write_result("skip", "L1 has no /dev/kvm after kvm_amd (no SVM?): %s\n" % why)
        event("skip")
        return
    set_hostname(plan["hostname"])
    net_up("lo")
    event("cmd-start")
    status = run_command(plan["cmd"])
    event("cmd-exit", str(status))
    write_result("status", "%d\n" % status)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        import traceback
        text = traceback.format_exc()
        print(text, file=sys.stderr, flush=True)
        try:
            write_result("error", text)
        except OSError:
            pass
    os.sync()
    libc.reboot(RB_POWER_OFF)

# SPDX-License-Identifier: Apache-2.0
"""The host's side of what L1 does: the plan of L1's root file system and the
command script. Pure functions over text and listings the caller reads, so
that bed_test.py can check them without QEMU.

L1's root is a tmpfs (the monitor's jail calls pivot_root, which fails on the
initramfs rootfs). Stage 1 (l1_stage1.sh) mounts the host's root over 9p at
HOST_MOUNT, puts /run, /dev, /proc, /sys and the usr-ish top-level entries
(STAGE1_ENTRIES) into the new root and switches to it; stage 2 (l1_init.py)
then carries out the steps planned here, in order.

Writable places that tests fill with images live on SCRATCH_MOUNT, an ext4
disk the host makes for each run: L1's kernel (6.12) mounts EROFS from a
file only if the file's file system can read folios, which tmpfs and
overlayfs cannot ("Block device required"), while the host keeps /tmp and
/var/lib on ext4. Without the disk ("scratch" steps) they fall back to tmpfs.
"""
import os
import re
import shlex

# Where stage 1 and stage 2 leave things in L1's new root.
BED_DIR = "/run/nested-bed"
HOST_MOUNT = BED_DIR + "/host"        # the host's / over 9p, read-only
RESULTS_MOUNT = BED_DIR + "/results"  # the run's writable 9p share
SCRATCH_MOUNT = BED_DIR + "/scratch"  # the run's ext4 disk (serial SCRATCH_SERIAL)
SCRATCH_SERIAL = "nested-scratch"

# Top-level entries stage 1 handles itself (python3 must run from the new root).
STAGE1_ENTRIES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Shared read-only.
RO_ENTRIES = ("etc", "opt", "boot", "srv")
# Shared with a writable upper: tests may write there (HOME=/root and its
# ~/.cache/dsec-vmm, build trees under /work); writes stay in L1.
OVERLAY_ENTRIES = ("root", "home", "work")
# Fresh and empty in L1, whatever the host has there: (op, mode), op
# "scratch" (a directory on the disk) or "tmpfs". /run comes from stage 1.
FRESH_ENTRIES = {"tmp": ("scratch", 0o1777), "mnt": ("tmpfs", 0o755), "media": ("tmpfs", 0o755)}
# Entries of /var: fresh ones, overlays (apt's cache, /var/lib); the rest
# read-only; symlinks kept.
VAR_FRESH = {"tmp": ("scratch", 0o1777), "log": ("tmpfs", 0o755)}
VAR_OVERLAY = ("lib", "cache")
# The project's own state under /var/lib (layer stores, trajectories): on the
# disk, as a copy of the host's if it has one (layer images are mounted from
# there).
STATE_DIRS = ("/var/lib/dsec-vmm",)
# Everything else at the host's top level (proc, sys, dev, run, lost+found,
# the machinery's own directories) is not shared, unless the run's current
# directory or the checkout lies there (checkout_overlays).
_NEVER_SHARED = ("proc", "sys", "dev", "run", "lost+found")

# Special file systems mirrored from the host when it has them mounted there.
MIRRORED_FS = ("bpf", "tracefs", "debugfs", "securityfs", "configfs", "pstore", "mqueue")
_MOUNT_OPTS_DROPPED = {"rw", "ro", "relatime", "noatime", "nodiratime", "strictatime", "seclabel"}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

DEFAULT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "SHELL": "/bin/sh",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
}


def step(op, **kw):
    kw["op"] = op
    return kw


def _fresh(path, how):
    op, mode = how
    return [step("mkdir", path=path, mode=0o755), step(op, path=path, mode=mode)]


def _shared(kind, path, op):
    """A host entry of kind "dir" | "file" | "symlink:<target>" at path."""
    if kind.startswith("symlink:"):
        return [step("symlink", target=kind[len("symlink:"):], path=path)]
    if kind != "dir":
        return []
    return [step("mkdir", path=path, mode=0o755), step(op, src=path, path=path)]


def root_plan(top, var, extra_ro=(), extra_overlay=(), state_exists=lambda path: False):
    """Mount steps that build L1's root below what stage 1 did.

    top, var: {name: kind} of the host's / and /var (see bed.list_dir).
    extra_ro, extra_overlay: more top-level names to share (read-only, or
    with a writable upper). state_exists(path): whether the host has that
    STATE_DIRS entry (copied) or not (an empty directory)."""
    steps = []
    ro = set(RO_ENTRIES) | set(extra_ro)
    overlay = set(OVERLAY_ENTRIES) | set(extra_overlay)
    for name in sorted(set(top) | set(FRESH_ENTRIES) | {"var"}):
        kind = top.get(name, "none")
        path = "/" + name
        if name in STAGE1_ENTRIES:
            continue
        if name in FRESH_ENTRIES:
            steps.extend(_fresh(path, FRESH_ENTRIES[name]))
        elif name == "var" and kind in ("dir", "none"):
            steps.append(step("mkdir", path=path, mode=0o755))
            steps.extend(_var_steps(var, state_exists))
        elif name in overlay:
            steps.extend(_shared(kind, path, "overlay"))
        elif name in ro:
            steps.extend(_shared(kind, path, "bind"))
    return steps


def _var_steps(var, state_exists):
    steps = []
    for name in sorted(set(var) | set(VAR_FRESH)):
        kind = var.get(name, "none")
        path = "/var/" + name
        if name in VAR_FRESH and not kind.startswith("symlink:"):
            steps.extend(_fresh(path, VAR_FRESH[name]))
        else:
            steps.extend(_shared(kind, path, "overlay" if name in VAR_OVERLAY else "bind"))
    if "run" not in var:
        steps.append(step("symlink", target="/run", path="/var/run"))
    if var.get("lib") == "dir":
        for d in STATE_DIRS:
            steps.append(step("mkdir", path=d, mode=0o755))
            if state_exists(d):
                steps.append(step("copy", src=d, path=d))
            else:
                steps.append(step("scratch", path=d, mode=0o755))
    return steps


def parse_bind(text, isdir, what="--bind"):
    """(src, dst) from "SRC:DST" (absolute paths; SRC a host directory)."""
    src, sep, dst = text.partition(":")
    src, dst = os.path.normpath(src or "."), os.path.normpath(dst or ".")
    if not sep or not src.startswith("/") or not dst.startswith("/") or dst == "/":
        raise ValueError("%s %s: want SRC:DST, both absolute, DST not /" % (what, text))
    if not isdir(src):
        raise ValueError("%s %s: %s is not a directory here" % (what, text, src))
    return src, dst


def bind_plan(binds, copies=()):
    """Host directories shown elsewhere in L1: binds with a writable upper
    (cheap), copies on the disk (a real file system: EROFS mounts from it
    work; costs the copy at boot). After root_plan: their mount points may
    lie in its overlays or fresh directories."""
    steps = []
    for src, dst in binds:
        steps.append(step("mkdir", path=dst, mode=0o755))
        steps.append(step("overlay", src=src, path=dst))
    for src, dst in copies:
        steps.append(step("mkdir", path=dst, mode=0o755))
        steps.append(step("copy", src=src, path=dst))
    return steps


def dev_plan():
    """What a Debian system has in /dev beyond devtmpfs."""
    return [
        step("mkdir", path="/dev/pts", mode=0o755),
        step("mount", fstype="devpts", source="devpts", path="/dev/pts", flags=["nosuid", "noexec"],
             data="mode=0620,ptmxmode=0666"),
        step("mkdir", path="/dev/shm", mode=0o755),
        step("tmpfs", path="/dev/shm", mode=0o1777),
        step("symlink", target="/proc/self/fd", path="/dev/fd"),
        step("symlink", target="/proc/self/fd/0", path="/dev/stdin"),
        step("symlink", target="/proc/self/fd/1", path="/dev/stdout"),
        step("symlink", target="/proc/self/fd/2", path="/dev/stderr"),
        step("mkdir", path="/run/lock", mode=0o1777),
    ]


def parse_mountinfo(text):
    """[(mount point, fstype, source, super options)] from /proc/self/mountinfo."""
    mounts = []
    for line in text.splitlines():
        if " - " not in line:
            continue
        left, right = line.split(" - ", 1)
        lf = left.split()
        rf = right.split()
        if len(lf) < 5 or len(rf) < 2:
            continue
        point = lf[4].replace("\\040", " ")
        fstype, source = rf[0], rf[1]
        sopts = rf[2] if len(rf) > 2 else ""
        mounts.append((point, fstype, source, sopts))
    return mounts


def _fs_data(fstype, sopts):
    opts = [o for o in sopts.split(",") if o and o not in _MOUNT_OPTS_DROPPED]
    if fstype == "cgroup":
        # A named hierarchy without controllers must say so, or v1 binds
        # every controller to it.
        known = [o for o in opts if not o.startswith("name=") and "=" not in o
                 and o not in ("noprefix", "clone_children", "xattr", "cpuset_v2_mode", "none")]
        if not known and "none" not in opts:
            opts.insert(0, "none")
    if fstype == "tmpfs":
        opts = [o for o in opts if not o.startswith(("size=", "nr_inodes=", "inode64"))]
    return ",".join(opts)


# Kernel options (6.11+) without which a controller has no v1 hierarchy; it
# is then in the v2 one.
V1_OPTIONS = {"memory": "CONFIG_MEMCG_V1", "cpuset": "CONFIG_CPUSETS_V1"}


def v1_missing(config_text):
    """Controllers whose v1 hierarchy a kernel .config switches off."""
    return sorted(c for c, opt in V1_OPTIONS.items() if "# %s is not set" % opt in config_text)


def sys_plan(mountinfo_text, no_v1=()):
    """The host's cgroup hierarchies (v1 controllers, named ones, the v2
    hierarchy) and special file systems under /sys, as steps that mount the
    same in L1, less the v1 hierarchies of no_v1 (L1's kernel has those
    controllers in v2 only). Optional: a mount L1's kernel refuses is
    reported, not fatal."""
    steps = []
    for point, fstype, source, sopts in parse_mountinfo(mountinfo_text):
        if fstype == "cgroup" and set(sopts.split(",")) & set(no_v1):
            continue
        if not point.startswith("/sys/") :
            continue
        if point.startswith("/sys/fs/cgroup"):
            if fstype not in ("cgroup", "cgroup2", "tmpfs"):
                continue
        elif fstype not in MIRRORED_FS:
            continue
        steps.append(step("mkdir", path=point, mode=0o755, optional=True))
        steps.append(step("mount", fstype=fstype, source=source, path=point,
                          flags=["nosuid", "nodev", "noexec"], data=_fs_data(fstype, sopts),
                          optional=True))
    return steps


def check_env_name(name):
    if not _ENV_NAME.match(name):
        raise ValueError("bad environment variable name %r" % name)
    return name


def command_script(argv, env, cwd):
    """/bin/sh text that runs argv with exactly env (the script starts with an
    empty environment) in cwd. Exit 125 with a message if cwd is missing."""
    if not argv:
        raise ValueError("empty command")
    lines = ["#!/bin/sh", "# Written by tests/nested/bed.py: the command to run in L1."]
    for name in sorted(env):
        lines.append("export %s=%s" % (check_env_name(name), shlex.quote(env[name])))
    lines.append("cd -- %s || { echo \"nested-bed: no directory %s in L1\" >&2; exit 125; }"
                 % (shlex.quote(cwd), shlex.quote(cwd).replace('"', '\\"')))
    lines.append("exec " + " ".join(shlex.quote(a) for a in argv))
    return "\n".join(lines) + "\n"


def unshared_reason(cwd, extra_overlay=()):
    """Why cwd (absolute, resolved) does not exist in L1 as on the host, or ""."""
    parts = cwd.strip("/").split("/")
    if cwd == "/":
        return ""
    first = parts[0]
    shared = set(STAGE1_ENTRIES) | set(RO_ENTRIES) | set(OVERLAY_ENTRIES) | set(extra_overlay)
    if first == "var" and len(parts) > 1:
        if parts[1] in VAR_FRESH:
            return "/var/%s is fresh and empty in L1" % parts[1]
        return ""
    if first == "var":
        return ""
    if first in FRESH_ENTRIES or first == "run":
        return "/%s is fresh and empty in L1" % first
    if first not in shared:
        return "/%s is not shared with L1" % first
    return ""


def checkout_overlays(paths):
    """Top-level names of the host to share with a writable upper because a
    path the run needs lies under them (the current directory, the checkout
    this bed runs from: a CI checkout may live in any top-level directory,
    /check for one). Only plain top-level directories nothing else in L1
    claims; fresh ones (/tmp, /run) and the kernel's (/proc, ...) stay as
    they are, and unshared_reason still names them."""
    out = []
    for path in paths:
        parts = path.strip("/").split("/")
        if path == "/" or not parts[0]:
            continue
        first = parts[0]
        if first in _NEVER_SHARED or first in FRESH_ENTRIES or first in out:
            continue
        if unshared_reason("/" + first).endswith("is not shared with L1"):
            out.append(first)
    return out

# SPDX-License-Identifier: Apache-2.0
"""`bed.py prepare`: the L1 image of the nested bed, cached outside the checkout.

Under ${DSEC_CACHE_DIR:-$HOME/.cache/dsec-vmm}/nested/:
  debs/                 kernel packages as apt-get download left them
  kernel-<pkg>_<ver>/   one unpacked package (boot/ plus the vmlinux extracted
                        from its bzImage, lib/modules/<kver>/ with
                        modules.dep from depmod: Debian's package ships none,
                        its postinst runs depmod); L1 loads extra modules from
                        it with modprobe -d
  <hash>/               kernel (the PVH vmlinux from the package's bzImage,
                        or the bzImage), initrd.gz (cpio newc: busybox, the init
                        scripts, the modules stage 1 loads), manifest.json
  lock                  flock: concurrent prepares build once
<hash> covers the kernel package and version, the module lists, both init
scripts and busybox.
"""
import fcntl
import functools
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE_FORMAT = 2

# Debian's cloud flavour (linux-image-cloud-amd64) has no 9p at all
# ("# CONFIG_NET_9P is not set" in its config), so the bed uses the generic
# flavour, whose kvm_amd also wants ccp (modules.dep pulls it in).
DEFAULT_FLAVOUR = "amd64"
# Bookworm's own kernel (the metapackage's, 6.1) cannot mount EROFS from a
# file (CONFIG_EROFS_FS_BACKED_BY_FILE is 6.12+), which the jail and the
# layer code use; bookworm's archive also carries 6.12 (linux-image-6.12.N+
# deb12-<flavour>), so that is the default, and "meta" selects the
# metapackage's kernel.
DEFAULT_SERIES = "6.12"
# Loaded by stage 1 from the initramfs; it cannot go on without them.
# crc32c_generic: ext4's soft dependency (modules.softdep "pre: crc32c", an
# alias), which modules.dep does not list and stage 1 has no modprobe for.
REQUIRED_MODULES = ("virtio_pci", "virtio_console", "9pnet_virtio", "9p", "overlay", "virtio_blk",
                    "crc32c_generic", "ext4")
# Loaded by stage 1, allowed to fail: without SVM kvm_amd does not load and
# the run is skipped (stage 2 looks for /dev/kvm).
KVM_MODULES = ("kvm_amd",)
# Loaded by stage 2 with modprobe from the unpacked package: what the host's
# kernel has built in and the project's tests use (EROFS layers, loop,
# tun/veth/bridge, zram, fuse).
EXTRA_MODULES = ("erofs", "loop", "tun", "veth", "bridge", "zram", "fuse")
# What L1 must have for the bed to work at all.
REQUIRED_CONFIG = ("CONFIG_NET_9P", "CONFIG_NET_9P_VIRTIO", "CONFIG_9P_FS", "CONFIG_VIRTIO_PCI",
                   "CONFIG_VIRTIO_CONSOLE", "CONFIG_VIRTIO_BLK", "CONFIG_EXT4_FS", "CONFIG_OVERLAY_FS",
                   "CONFIG_KVM_AMD", "CONFIG_TMPFS")


class Unavailable(Exception):
    """The host cannot provide the image (a skip, not a bug)."""


def cache_root():
    base = os.environ.get("DSEC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dsec-vmm")
    return os.path.join(base, "nested")


def _run(argv, **kw):
    try:
        return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=300, **kw)
    except FileNotFoundError as e:
        raise Unavailable("%s not found" % argv[0]) from e
    except subprocess.TimeoutExpired as e:
        raise Unavailable("%s timed out" % " ".join(argv)) from e


# --- package resolution ---------------------------------------------------

def parse_depends(text, flavour):
    """Versioned kernel packages named in `apt-cache depends linux-image-<flavour>`."""
    want = re.compile(r"^linux-image-\d+(\.\d+)*-\d+-%s$" % re.escape(flavour))
    out = []
    for line in text.splitlines():
        line = line.strip().lstrip("|")
        if not line.startswith("Depends:"):
            continue
        pkg = line.split(":", 1)[1].strip()
        if want.match(pkg) and pkg not in out:
            out.append(pkg)
    return out


def parse_madison(text):
    """Versions in `apt-cache madison PKG` output (' pkg | ver | source')."""
    out = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) >= 3 and f[1] and f[1] not in out:
            out.append(f[1])
    return out


def _dpkg_cmp(a, b):
    if a == b:
        return 0
    r = subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False)
    return -1 if r.returncode == 0 else 1


def newest(versions):
    return max(versions, key=functools.cmp_to_key(_dpkg_cmp))


def _abi_key(pkg):
    # linux-image-6.1.0-57-amd64: compare the numeric ABI parts.
    return [int(x) for x in re.findall(r"\d+", pkg)]


def _apt_lists_key():
    """Changes whenever apt-get update changes what apt-cache answers."""
    lists = "/var/lib/apt/lists"
    try:
        return sorted((e.name, e.stat().st_mtime_ns) for e in os.scandir(lists) if e.is_file())
    except OSError:
        return None


def parse_series_names(names, series, flavour):
    """The newest-ABI package of a kernel series among apt-cache pkgnames
    output: linux-image-<series>.<N>+<suffix>-<flavour>[-unsigned] (same
    kernel signed or not; the signed name wins a tie), or None."""
    want = re.compile(r"^linux-image-%s\.(\d+)\+[\w.~]+-%s(-unsigned)?$" % (re.escape(series), re.escape(flavour)))
    best = None
    for name in names.split():
        m = want.match(name)
        if m:
            key = (int(m.group(1)), m.group(2) is None)
            if best is None or key > best[0]:
                best = (key, name)
    return best[1] if best else None


def resolve_package(flavour, series=DEFAULT_SERIES, root=None):
    """(package, version): the newest package of the kernel series (or, for
    series "meta", the package the metapackage linux-image-<flavour> depends
    on), at the newest version apt offers. Remembered in root until apt's
    lists change (apt-cache takes ~2 s)."""
    memo = os.path.join(root, "resolved-%s-%s.json" % (series, flavour)) if root else None
    key = _apt_lists_key()
    if memo and key is not None:
        try:
            with open(memo) as f:
                m = json.load(f)
            if m["key"] == json.loads(json.dumps(key)):
                return m["package"], m["version"]
        except (OSError, ValueError, KeyError):
            pass
    pkg, version = _resolve_package(flavour, series)
    if memo and key is not None:
        with open(memo + ".tmp", "w") as f:
            json.dump({"key": key, "package": pkg, "version": version}, f)
        os.replace(memo + ".tmp", memo)
    return pkg, version


def _resolve_package(flavour, series):
    if series == "meta":
        meta = "linux-image-" + flavour
        r = _run(["apt-cache", "depends", meta])
        pkgs = parse_depends(r.stdout, flavour) if r.returncode == 0 else []
        if not pkgs:
            raise Unavailable("apt-cache knows no kernel package behind %s (%s)" % (meta, r.stderr.strip()))
        pkg = max(pkgs, key=_abi_key)
    else:
        r = _run(["apt-cache", "pkgnames", "linux-image-%s." % series])
        pkg = parse_series_names(r.stdout, series, flavour)
        if pkg is None:
            raise Unavailable("apt-cache offers no linux-image-%s.N-%s package (try --series meta)"
                              % (series, flavour))
    r = _run(["apt-cache", "madison", pkg])
    versions = parse_madison(r.stdout)
    if not versions:
        raise Unavailable("apt-cache offers no version of %s" % pkg)
    return pkg, newest(versions)


def deb_name(pkg, version):
    return "%s_%s_amd64.deb" % (pkg, version.replace(":", "%3a"))


def fetch_deb(root, pkg, version):
    debs = os.path.join(root, "debs")
    os.makedirs(debs, exist_ok=True)
    path = os.path.join(debs, deb_name(pkg, version))
    if os.path.exists(path):
        return path
    with tempfile.TemporaryDirectory(dir=debs, prefix=".download.") as tmp:
        r = _run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", "%s=%s" % (pkg, version)],
                 cwd=tmp)
        got = [f for f in os.listdir(tmp) if f.endswith(".deb")]
        if r.returncode != 0 or len(got) != 1:
            raise Unavailable("apt-get download %s=%s failed: %s" % (pkg, version, r.stderr.strip()[-300:]))
        os.rename(os.path.join(tmp, got[0]), path)
    return path


def unpack_kernel(root, deb, pkg, version):
    """The unpacked package with modules.dep; (dir, kver)."""
    dest = os.path.join(root, "kernel-%s_%s" % (pkg, version.replace(":", "%3a")))
    if not os.path.exists(dest + "/.complete"):
        shutil.rmtree(dest, ignore_errors=True)
        part = dest + ".partial"
        shutil.rmtree(part, ignore_errors=True)
        r = _run(["dpkg-deb", "-x", deb, part])
        if r.returncode != 0:
            shutil.rmtree(part, ignore_errors=True)
            raise Unavailable("dpkg-deb -x %s failed: %s" % (deb, r.stderr.strip()))
        kvers = os.listdir(os.path.join(part, "lib", "modules"))
        if len(kvers) != 1:
            raise Unavailable("%s holds %d module trees, expected one" % (deb, len(kvers)))
        r = _run(["depmod", "-b", part, kvers[0]])
        if r.returncode != 0:
            raise Unavailable("depmod -b %s %s failed: %s" % (part, kvers[0], r.stderr.strip()))
        os.rename(part, dest)
        with open(dest + "/.complete", "w") as f:
            f.write(kvers[0] + "\n")
    with open(dest + "/.complete") as f:
        kver = f.read().strip()
    return dest, kver


# --- the kernel QEMU loads -------------------------------------------------

def _has_pvh_note(elf):
    """Whether a 64-bit little-endian ELF has the PVH entry note
    (XEN_ELFNOTE_PHYS32_ENTRY, type 18, owner "Xen") that QEMU's -kernel needs
    to boot it directly."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == 18:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def decompress(data):
    """xz, gzip or zstd data (zstd through the zstd tool: Python 3.11 has no
    zstd module), None if it is none of them or cannot be read."""
    try:
        if data.startswith(b"\xfd7zXZ\x00"):
            return lzma.LZMADecompressor().decompress(data)
        if data.startswith(b"\x1f\x8b\x08"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
    except (lzma.LZMAError, zlib.error):
        return None
    if data.startswith(b"\x28\xb5\x2f\xfd") and shutil.which("zstd"):
        r = subprocess.run(["zstd", "-dcq"], input=data, capture_output=True, check=False, timeout=120)
        return r.stdout if r.returncode == 0 else None
    return None


def extract_vmlinux(bzimage):
    """The ELF vmlinux inside a bzImage if it can boot through PVH, else
    None. QEMU boots it without SeaBIOS's linuxboot ROM and without
    decompressing it under TCG: measured here, L1's kernel starts 0.5 s after
    QEMU instead of 5-6 s. The payload's place comes from the setup header
    (Documentation/arch/x86/boot.rst: setup_sects at 0x1f1, payload_offset
    and payload_length at 0x248); the kernel build appends the decompressed
    size as a little-endian u32, which checks the result."""
    if len(bzimage) < 0x250 or bzimage[0x202:0x206] != b"HdrS":
        return None
    setup_sects = bzimage[0x1f1] or 4
    offset, length = struct.unpack_from("<II", bzimage, 0x248)
    start = (setup_sects + 1) * 512 + offset
    payload = bzimage[start:start + length]
    if len(payload) != length or length < 8:
        return None
    size, = struct.unpack_from("<I", payload, length - 4)
    elf = decompress(payload[:-4])
    if elf is None or len(elf) != size or not _has_pvh_note(elf):
        return None
    return elf


def qemu_kernel(tree, kver):
    """The kernel file QEMU boots: the PVH vmlinux extracted once next to the
    package's bzImage, or the bzImage if it holds none."""
    bz = os.path.join(tree, "boot", "vmlinuz-" + kver)
    elf_path = os.path.join(tree, "boot", "vmlinux-" + kver)
    none_marker = elf_path + ".none"
    if not os.path.exists(elf_path) and not os.path.exists(none_marker):
        elf = extract_vmlinux(_read(bz, "rb"))
        with open((elf_path if elf else none_marker) + ".tmp", "wb") as f:
            f.write(elf or b"")
        os.rename((elf_path if elf else none_marker) + ".tmp", elf_path if elf else none_marker)
    return elf_path if os.path.exists(elf_path) else bz


def check_config(text):
    """Missing options of REQUIRED_CONFIG in a kernel .config text."""
    have = {}
    for line in text.splitlines():
        m = re.match(r"^(CONFIG_\w+)=([ym])", line)
        if m:
            have[m.group(1)] = m.group(2)
    return [c for c in REQUIRED_CONFIG if c not in have]


# --- modules --------------------------------------------------------------

def module_name(path):
    base = os.path.basename(path)
    base = re.sub(r"\.ko(\.(xz|gz|zst))?$", "", base)
    return base.replace("-", "_")


def parse_modules_dep(text):
    """{module name: (path, [dependency paths])} from modules.dep."""
    mods = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        path, deps = line.split(":", 1)
        path = path.strip()
        mods[module_name(path)] = (path, deps.split())
    return mods


def resolve_modules(mods, wanted, builtin=()):
    """Module paths to load, dependencies first, each once. A wanted module
    built into the kernel needs nothing; an unknown one is an error."""
    by_path = {p: n for n, (p, _) in mods.items()}
    order, state = [], {}
    builtin = {module_name(b) for b in builtin}

    def visit(name, chain):
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise ValueError("module dependency cycle: %s" % " -> ".join(chain + [name]))
        state[name] = "visiting"
        path, deps = mods[name]
        for d in deps:
            if d not in by_path:
                raise ValueError("%s needs %s, which modules.dep does not list" % (name, d))
            visit(by_path[d], chain + [name])
        state[name] = "done"
        order.append(path)

    for w in wanted:
        n = module_name(w)
        if n in mods:
            visit(n, [])
        elif n not in builtin:
            raise ValueError("no module %s in modules.dep" % n)
    return order


def load_list(mods, required, optional, builtin=()):
    """[(path, "required"|"optional")]: both sets' closures in one order; a
    module needed by a required one is required."""
    req = resolve_modules(mods, required, builtin)
    opt = resolve_modules(mods, optional, builtin)
    out = [(p, "required") for p in req]
    out += [(p, "optional") for p in opt if p not in req]
    return out


# --- cpio -----------------------------------------------------------------

class Cpio:
    """A cpio "newc" archive (the initramfs format, Documentation/driver-api/
    early-userspace/buffer-format.rst), written deterministically: mtime 0,
    owner root, inode numbers in order."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1
        self.names = set()

    def _entry(self, name, mode, data=b"", rdev=(0, 0)):
        name = name.lstrip("/")
        if name in self.names:
            raise ValueError("duplicate cpio entry %s" % name)
        self.names.add(name)
        nb = name.encode() + b"\0"
        fields = (self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(nb), 0)
        self.ino += 1
        self.buf.write(b"070701" + b"".join(b"%08X" % f for f in fields))
        self.buf.write(nb)
        self.buf.write(b"\0" * (-(110 + len(nb)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def dir(self, name, mode=0o755):
        parent = os.path.dirname(name.rstrip("/"))
        if parent not in ("", "/") and parent.lstrip("/") not in self.names:
            self.dir(parent)
        if name.lstrip("/") not in self.names:
            self._entry(name, 0o040000 | mode)

    def file(self, name, data, mode=0o644):
        parent = os.path.dirname(name)
        if parent not in ("", "/"):
            self.dir(parent)
        self._entry(name, 0o100000 | mode, data)

    def symlink(self, name, target):
        self._entry(name, 0o120777, target.encode())

    def chardev(self, name, major, minor, mode=0o600):
        self._entry(name, 0o020000 | mode, rdev=(major, minor))

    def finish(self):
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


def _read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def build_initramfs(tree, kver, loads, busybox):
    c = Cpio()
    for d in ("bin", "dev", "proc", "sys", "newroot", "host", "results"):
        c.dir(d)
    c.chardev("dev/console", 5, 1)
    c.chardev("dev/null", 1, 3, 0o666)
    c.file("bin/busybox", _read(busybox, "rb"), 0o755)
    c.file("init", _read(os.path.join(HERE, "l1_stage1.sh"), "rb"), 0o755)
    c.file("l1_init.py", _read(os.path.join(HERE, "l1_init.py"), "rb"), 0o644)
    moddir = os.path.join(tree, "lib", "modules", kver)
    lines = []
    for path, need in loads:
        data = _read(os.path.join(moddir, path), "rb")
        if not path.endswith(".ko"):
            # busybox insmod wants the ELF: decompress .ko.xz/.gz/.zst here.
            data = decompress(data)
            if data is None:
                raise Unavailable("cannot decompress module %s" % path)
            path = path[:path.rindex(".ko") + 3]
        c.file("lib/modules/" + path, data)
        lines.append("lib/modules/%s %s\n" % (path, need))
    c.file("modules.load", "".join(lines).encode())
    return gzip.compress(c.finish(), compresslevel=6, mtime=0)


# --- prepare --------------------------------------------------------------

def image_hash(pkg, version, kver, loads, busybox):
    h = hashlib.sha256()
    meta = {"format": IMAGE_FORMAT, "package": pkg, "version": version, "kver": kver,
            "loads": loads, "extra": list(EXTRA_MODULES)}
    h.update(json.dumps(meta, sort_keys=True).encode())
    for f in (os.path.join(HERE, "l1_stage1.sh"), os.path.join(HERE, "l1_init.py"), busybox):
        h.update(hashlib.sha256(_read(f, "rb")).digest())
    return h.hexdigest()[:16]


def find_busybox():
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.exists(p):
            with open(p, "rb") as f:
                head = f.read(1 << 16)
            # A static binary has no PT_INTERP, hence no "ld-linux" path.
            if head[:4] == b"\x7fELF" and b"/ld-linux" not in head:
                return p
    raise Unavailable("no static busybox (apt-get install busybox-static)")


KEEP_IMAGES = 4


def prune(root, keep=KEEP_IMAGES):
    """Under the lock: drops all but the `keep` most recently used images
    (prepare touches an image's manifest each time it hands it out), the
    unpacked kernels none of them uses, and partial builds a killed prepare
    left. Downloaded .debs stay."""
    images = []
    for e in os.scandir(root):
        m = os.path.join(e.path, "manifest.json")
        if e.name.startswith(".") and e.is_dir():
            shutil.rmtree(e.path, ignore_errors=True)  # a partial build (we hold the lock)
        elif e.is_dir() and os.path.exists(m):
            images.append((os.stat(m).st_mtime, e.path))
    images.sort(reverse=True)
    trees = set()
    for _, path in images[:keep]:
        with open(os.path.join(path, "manifest.json")) as f:
            trees.add(json.load(f)["tree"])
    for _, path in images[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    for e in os.scandir(root):
        if e.name.startswith("kernel-") and e.is_dir() and e.path not in trees and os.path.exists(
                e.path + "/.complete"):
            shutil.rmtree(e.path, ignore_errors=True)


def prepare(flavour=DEFAULT_FLAVOUR, series=DEFAULT_SERIES, log=lambda s: None):
    """The image directory's manifest (dict); builds it when needed."""
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    busybox = find_busybox()
    pkg, version = resolve_package(flavour, series, root)
    with open(os.path.join(root, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        deb = fetch_deb(root, pkg, version)
        tree, kver = unpack_kernel(root, deb, pkg, version)
        missing = check_config(_read(os.path.join(tree, "boot", "config-" + kver)))
        if missing:
            raise Unavailable("%s lacks %s" % (pkg, ", ".join(missing)))
        moddir = os.path.join(tree, "lib", "modules", kver)
        mods = parse_modules_dep(_read(os.path.join(moddir, "modules.dep")))
        builtin = _read(os.path.join(moddir, "modules.builtin")).split()
        try:
            loads = load_list(mods, REQUIRED_MODULES, KVM_MODULES, builtin)
            resolve_modules(mods, EXTRA_MODULES, builtin)
        except ValueError as e:
            raise Unavailable("%s: %s" % (pkg, e)) from e
        digest = image_hash(pkg, version, kver, loads, busybox)
        out = os.path.join(root, digest)
        manifest_path = os.path.join(out, "manifest.json")
        if not os.path.exists(manifest_path):
            log("building %s (%s %s, %d modules)" % (out, pkg, version, len(loads)))
            part = tempfile.mkdtemp(dir=root, prefix=".%s." % digest)
            try:
                with open(os.path.join(part, "initrd.gz"), "wb") as f:
                    f.write(build_initramfs(tree, kver, loads, busybox))
                os.link(qemu_kernel(tree, kver), os.path.join(part, "kernel"))
                manifest = {"hash": digest, "package": pkg, "version": version, "kver": kver,
                            "tree": tree, "modules": loads, "extra_modules": list(EXTRA_MODULES)}
                with open(os.path.join(part, "manifest.json"), "w") as f:
                    json.dump(manifest, f, indent=1)
                os.chmod(part, 0o755)
                os.rename(part, out)
            except BaseException:
                shutil.rmtree(part, ignore_errors=True)
                raise
        os.utime(manifest_path)
        prune(root)
    manifest = json.loads(_read(manifest_path))
    manifest["dir"] = out
    manifest["kernel"] = os.path.join(out, "kernel")
    manifest["initrd"] = os.path.join(out, "initrd.gz")
    return manifest

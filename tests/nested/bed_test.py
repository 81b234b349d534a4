#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the nested bed's pure parts (ctest nested_bed_unit_test,
label unit): the command script's quoting, the L1 root and cgroup plans,
modules.dep resolution, apt-cache parsing, the cpio writer. No QEMU."""
import gzip
import json
import lzma
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bed  # noqa: E402
import bed_image  # noqa: E402
import bed_plan  # noqa: E402

DUMP = ("import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
        "'env': dict(os.environ)}))")


class CommandScriptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="bed test 'dir\" ")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_script(self, text):
        path = os.path.join(self.tmp, "cmd.sh")
        with open(path, "w") as f:
            f.write(text)
        # As l1_init.py runs it: /bin/sh, empty environment.
        return subprocess.run(["/bin/sh", path], env={}, capture_output=True, text=True, check=False)

    def test_argv_env_and_cwd_arrive_exactly(self):
        args = ["a b", "it's", '"dq"', "$HOME", "`id`", "$(id)", "line\nbreak", "", "-n", "*", "\\",
                "ü", "tab\there", "!x", "a;b|c&d", "--"]
        env = {"PATH": "/usr/bin:/bin", "V1": "x'y\"z $HOME `id`\n2", "EMPTY": "", "_u9": "="}
        r = self.run_script(bed_plan.command_script([sys.executable, "-c", DUMP] + args, env, self.tmp))
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual(got["argv"], args)
        self.assertEqual(got["cwd"], self.tmp)
        got["env"].pop("PWD", None)
        got["env"].pop("OLDPWD", None)
        got["env"].pop("LC_CTYPE", None)  # python's C locale coercion
        self.assertEqual(got["env"], env)

    def test_exit_status_is_the_commands(self):
        r = self.run_script(bed_plan.command_script(["sh", "-c", "exit 42"], {"PATH": "/bin"}, "/"))
        self.assertEqual(r.returncode, 42)

    def test_missing_cwd_exits_125_with_a_message(self):
        r = self.run_script(bed_plan.command_script(["true"], {"PATH": "/bin"}, self.tmp + "/gone"))
        self.assertEqual(r.returncode, 125)
        self.assertIn("no directory", r.stderr)

    def test_rejects_bad_names_and_empty_commands(self):
        with self.assertRaises(ValueError):
            bed_plan.command_script(["true"], {"A-B": "1"}, "/")
        with self.assertRaises(ValueError):
            bed_plan.command_script(["true"], {"X; rm -rf /": "1"}, "/")
        with self.assertRaises(ValueError):
            bed_plan.command_script([], {}, "/")

    def test_environment_passes_dsec_and_gtest_and_env_options(self):
        env = bed.command_env({"DSEC_X": "1", "GTEST_FILTER": "A.*", "HOME": "/h", "OTHER": "no", "KEEP": "k"},
                              ["FOO=a=b", "KEEP", "HOME=/root2"])
        self.assertEqual(env["DSEC_X"], "1")
        self.assertEqual(env["GTEST_FILTER"], "A.*")
        self.assertEqual(env["FOO"], "a=b")
        self.assertEqual(env["KEEP"], "k")
        self.assertEqual(env["HOME"], "/root2")
        self.assertEqual(env["DSEC_NESTED"], "1")
        self.assertNotIn("OTHER", env)
        with self.assertRaises(ValueError):
            bed.command_env({}, ["UNSET_HERE"])


MODULES_DEP = """\
kernel/arch/x86/kvm/kvm.ko: kernel/virt/lib/irqbypass.ko
kernel/arch/x86/kvm/kvm-amd.ko: kernel/drivers/crypto/ccp/ccp.ko kernel/arch/x86/kvm/kvm.ko kernel/virt/lib/irqbypass.ko
kernel/virt/lib/irqbypass.ko:
kernel/drivers/crypto/ccp/ccp.ko:
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
"""


class ModulesTest(unittest.TestCase):
    def setUp(self):
        self.mods = bed_image.parse_modules_dep(MODULES_DEP)

    def assert_deps_first(self, order):
        self.assertEqual(len(order), len(set(order)), "each module once")
        for i, path in enumerate(order):
            for d in self.mods[bed_image.module_name(path)][1]:
                self.assertIn(d, order[:i], "%s before %s" % (d, path))

    def test_names_normalise_dashes_and_compression(self):
        self.assertEqual(bed_image.module_name("kernel/arch/x86/kvm/kvm-amd.ko"), "kvm_amd")
        self.assertEqual(bed_image.module_name("a/b/9pnet_virtio.ko.xz"), "9pnet_virtio")
        self.assertIn("kvm_amd", self.mods)

    def test_dependencies_come_first_once_each(self):
        order = bed_image.resolve_modules(self.mods, ["virtio_pci", "9pnet_virtio", "9p", "kvm-amd"])
        self.assert_deps_first(order)
        self.assertEqual(order[-1], "kernel/arch/x86/kvm/kvm-amd.ko")
        self.assertEqual(len(order), 12)

    def test_builtin_modules_need_nothing_and_unknown_ones_fail(self):
        self.assertEqual(bed_image.resolve_modules(self.mods, ["overlay"], ["kernel/fs/overlayfs/overlay.ko"]), [])
        with self.assertRaises(ValueError):
            bed_image.resolve_modules(self.mods, ["nosuch"])

    def test_a_missing_dependency_or_a_cycle_fails(self):
        with self.assertRaises(ValueError):
            bed_image.resolve_modules(bed_image.parse_modules_dep("a.ko: b.ko\n"), ["a"])
        with self.assertRaises(ValueError):
            bed_image.resolve_modules(bed_image.parse_modules_dep("a.ko: b.ko\nb.ko: a.ko\n"), ["a"])

    def test_shared_dependencies_of_required_modules_are_required(self):
        mods = bed_image.parse_modules_dep("req.ko: common.ko\nopt.ko: common.ko only.ko\ncommon.ko:\nonly.ko:\n")
        self.assertEqual(bed_image.load_list(mods, ["req"], ["opt"]),
                         [("common.ko", "required"), ("req.ko", "required"),
                          ("only.ko", "optional"), ("opt.ko", "optional")])


class AptTest(unittest.TestCase):
    def test_depends_picks_the_flavours_versioned_packages(self):
        text = ("linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n"
                " |Depends: linux-image-6.1.0-58-amd64\n  Depends: linux-image-6.1.0-57-cloud-amd64\n"
                "  Recommends: firmware-linux-free\n")
        self.assertEqual(bed_image.parse_depends(text, "amd64"),
                         ["linux-image-6.1.0-57-amd64", "linux-image-6.1.0-58-amd64"])
        self.assertEqual(bed_image.parse_depends(text, "cloud-amd64"), ["linux-image-6.1.0-57-cloud-amd64"])

    def test_series_picks_the_newest_abi_of_the_flavour(self):
        names = ("linux-image-6.12.9+deb12-amd64\nlinux-image-6.12.117+deb12-amd64\n"
                 "linux-image-6.12.117+deb12-amd64-unsigned\nlinux-image-6.12.118+deb12-amd64-unsigned\n"
                 "linux-image-6.12.119+deb12-cloud-amd64\nlinux-image-6.12.120+deb12-amd64-dbg\n"
                 "linux-image-6.120.1+deb12-amd64\n")
        self.assertEqual(bed_image.parse_series_names(names, "6.12", "amd64"),
                         "linux-image-6.12.118+deb12-amd64-unsigned")
        self.assertEqual(bed_image.parse_series_names(names.replace("118", "117"), "6.12", "amd64"),
                         "linux-image-6.12.117+deb12-amd64")
        self.assertEqual(bed_image.parse_series_names(names, "6.12", "cloud-amd64"),
                         "linux-image-6.12.119+deb12-cloud-amd64")
        self.assertIsNone(bed_image.parse_series_names(names, "6.13", "amd64"))

    def test_madison_lists_versions(self):
        text = (" linux-image-6.1.0-57-amd64 | 6.1.192-3 | http://deb.debian.org/debian-security x Packages\n"
                " linux-image-6.1.0-57-amd64 | 6.1.176-1 | http://deb.debian.org/debian y Packages\n")
        self.assertEqual(bed_image.parse_madison(text), ["6.1.192-3", "6.1.176-1"])

    @unittest.skipUnless(shutil.which("dpkg"), "no dpkg")
    def test_newest_compares_debian_versions(self):
        self.assertEqual(bed_image.newest(["6.1.99-1", "6.1.192-3", "6.1.192-3~bpo1", "6.1.100-1"]), "6.1.192-3")

    def test_config_check_names_what_is_missing(self):
        have = "\n".join("%s=m" % c for c in bed_image.REQUIRED_CONFIG if c != "CONFIG_NET_9P")
        self.assertEqual(bed_image.check_config(have + "\n# CONFIG_NET_9P is not set\n"), ["CONFIG_NET_9P"])


def fake_elf(notes):
    """A 64-bit ELF with one PT_NOTE segment holding (owner, type) notes."""
    body = b""
    for owner, ntype in notes:
        name = owner + b"\0"
        body += struct.pack("<III", len(name), 4, ntype) + name + b"\0" * (-len(name) % 4) + b"\1\0\0\0"
    ehdr = bytearray(64)
    ehdr[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", ehdr, 0x20, 64)          # e_phoff
    struct.pack_into("<HH", ehdr, 0x36, 56, 1)      # e_phentsize, e_phnum
    phdr = struct.pack("<IIQQQQQQ", 4, 0, 64 + 56, 0, 0, len(body), len(body), 4)
    return bytes(ehdr) + phdr + body


def fake_bzimage(payload_plain, compress):
    setup_sects = 1
    hdr = bytearray((setup_sects + 1) * 512)
    hdr[0x1f1] = setup_sects
    hdr[0x202:0x206] = b"HdrS"
    payload = compress(payload_plain) + struct.pack("<I", len(payload_plain))
    struct.pack_into("<II", hdr, 0x248, 16, len(payload))
    return bytes(hdr) + b"\0" * 16 + payload + b"trailing code"


class VmlinuxTest(unittest.TestCase):
    def test_extracts_a_pvh_elf_from_xz_and_gzip(self):
        elf = fake_elf([(b"GNU", 3), (b"Xen", 18)])
        for compress in (lzma.compress, lambda d: gzip.compress(d, mtime=0)):
            self.assertEqual(bed_image.extract_vmlinux(fake_bzimage(elf, compress)), elf)

    @unittest.skipUnless(shutil.which("zstd"), "no zstd tool")
    def test_extracts_zstd(self):
        elf = fake_elf([(b"Xen", 18)])
        z = lambda d: subprocess.run(["zstd", "-q", "-c"], input=d, capture_output=True, check=True).stdout
        self.assertEqual(bed_image.extract_vmlinux(fake_bzimage(elf, z)), elf)

    def test_refuses_kernels_without_pvh_or_with_a_bad_size(self):
        self.assertIsNone(bed_image.extract_vmlinux(fake_bzimage(fake_elf([(b"Xen", 5)]), lzma.compress)))
        bad = bytearray(fake_bzimage(fake_elf([(b"Xen", 18)]), lzma.compress))
        bad[-len(b"trailing code") - 4] ^= 1  # the appended size
        self.assertIsNone(bed_image.extract_vmlinux(bytes(bad)))
        self.assertIsNone(bed_image.extract_vmlinux(b"not a kernel" * 100))


class PruneTest(unittest.TestCase):
    def test_keeps_the_recent_images_and_their_kernels(self):
        with tempfile.TemporaryDirectory() as root:
            for i, tree in enumerate(["kernel-a", "kernel-a", "kernel-b", "kernel-c"]):
                d = os.path.join(root, "img%d" % i)
                os.makedirs(d)
                with open(d + "/manifest.json", "w") as f:
                    json.dump({"tree": os.path.join(root, tree)}, f)
                os.utime(d + "/manifest.json", (1000 + i, 1000 + i))
            for tree in ("kernel-a", "kernel-b", "kernel-c", "kernel-d"):
                os.makedirs(os.path.join(root, tree))
                open(os.path.join(root, tree, ".complete"), "w").close()
            os.makedirs(os.path.join(root, ".img9.partial"))
            os.makedirs(os.path.join(root, "debs"))
            bed_image.prune(root, keep=2)
            self.assertEqual(sorted(os.listdir(root)), ["debs", "img2", "img3", "kernel-b", "kernel-c"])


class CpioTest(unittest.TestCase):
    def parse(self, data):
        out, pos = {}, 0
        while True:
            h = data[pos:pos + 110]
            self.assertEqual(h[:6], b"070701")
            f = [int(h[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
            mode, size, namesize = f[1], f[6], f[11]
            name = data[pos + 110:pos + 110 + namesize - 1].decode()
            pos += 110 + namesize
            pos += -pos % 4
            body = data[pos:pos + size]
            pos += size
            pos += -pos % 4
            if name == "TRAILER!!!":
                self.assertEqual(pos, len(data))
                return out
            out[name] = (mode, body, (f[9], f[10]))

    def test_entries_round_trip_aligned(self):
        c = bed_image.Cpio()
        c.file("lib/modules/x/kernel/a.ko", b"abc")
        c.file("init", b"#!/bin/sh\n", 0o755)
        c.symlink("bin/sh", "busybox")
        c.chardev("dev/console", 5, 1)
        got = self.parse(c.finish())
        self.assertEqual(got["lib/modules/x/kernel/a.ko"][1], b"abc")
        self.assertEqual(got["lib/modules/x/kernel"][0], 0o040755)
        self.assertEqual(got["init"][0], 0o100755)
        self.assertEqual(got["bin/sh"], (0o120777, b"busybox", (0, 0)))
        self.assertEqual(got["dev/console"][0], 0o020600)
        self.assertEqual(got["dev/console"][2], (5, 1))

    def test_duplicates_fail(self):
        c = bed_image.Cpio()
        c.file("a", b"")
        with self.assertRaises(ValueError):
            c.file("a", b"")

    @unittest.skipUnless(shutil.which("cpio"), "no GNU cpio")
    def test_gnu_cpio_reads_it(self):
        c = bed_image.Cpio()
        c.file("d/e/f.txt", b"hello\n")
        c.symlink("d/link", "e/f.txt")
        data = gzip.decompress(gzip.compress(c.finish(), mtime=0))
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run(["cpio", "-idm", "--quiet", "--no-absolute-filenames"], input=data, cwd=tmp,
                               capture_output=True, check=False)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(tmp, "d/link")) as f:
                self.assertEqual(f.read(), "hello\n")


HOST_TOP = {"bin": "symlink:usr/bin", "usr": "dir", "etc": "dir", "root": "dir", "home": "dir", "work": "dir",
            "tmp": "dir", "proc": "dir", "sys": "dir", "dev": "dir", "run": "dir", "var": "dir", "mnt": "dir",
            "lost+found": "dir", "farm": "dir", "opt": "dir", "container_info.json": "file"}
HOST_VAR = {"lib": "dir", "cache": "dir", "tmp": "dir", "log": "dir", "run": "symlink:/run",
            "lock": "symlink:/run/lock", "spool": "dir"}
MOUNTINFO = """\
23 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
42 23 0:39 / /sys/fs/bpf rw,relatime - bpf bpf rw,mode=700
43 23 0:40 / /mnt/x rw,relatime - tmpfs tmpfs rw
"""


class PlanTest(unittest.TestCase):
    def by_path(self, steps):
        out = {}
        for s in steps:
            out.setdefault(s["path"], []).append(s)
        return out

    def test_root_shares_what_tests_need_and_nothing_else(self):
        p = self.by_path(bed_plan.root_plan(HOST_TOP, HOST_VAR))
        ops = {k: [s["op"] for s in v] for k, v in p.items()}
        self.assertEqual(ops["/etc"], ["mkdir", "bind"])
        self.assertEqual(ops["/opt"], ["mkdir", "bind"])
        for d in ("/root", "/home", "/work", "/var/lib", "/var/cache"):
            self.assertEqual(ops[d], ["mkdir", "overlay"], d)
        for d in ("/tmp", "/var/tmp"):
            self.assertEqual(ops[d], ["mkdir", "scratch"], d)  # EROFS images get mounted from there
        for d in ("/mnt", "/media", "/var/log"):
            self.assertEqual(ops[d], ["mkdir", "tmpfs"], d)
        self.assertEqual(p["/tmp"][1]["mode"], 0o1777)
        self.assertEqual(ops["/var/spool"], ["mkdir", "bind"])
        self.assertEqual(p["/var/run"][0], {"op": "symlink", "target": "/run", "path": "/var/run"})
        self.assertEqual(p["/var/lock"][0]["target"], "/run/lock")
        self.assertEqual(ops["/var/lib/dsec-vmm"], ["mkdir", "scratch"])
        for d in ("/usr", "/bin", "/proc", "/sys", "/dev", "/run", "/farm", "/lost+found",
                  "/container_info.json"):
            self.assertNotIn(d, p, d)

    def test_state_dirs_come_after_var_lib_and_are_copied_when_the_host_has_them(self):
        steps = bed_plan.root_plan(HOST_TOP, HOST_VAR, state_exists=lambda d: d == "/var/lib/dsec-vmm")
        paths = [(s["op"], s["path"]) for s in steps]
        self.assertLess(paths.index(("overlay", "/var/lib")), paths.index(("copy", "/var/lib/dsec-vmm")))
        copy = [s for s in steps if s["op"] == "copy"][0]
        self.assertEqual(copy["src"], "/var/lib/dsec-vmm")

    def test_extra_shares_and_a_missing_var(self):
        p = self.by_path(bed_plan.root_plan({"farm": "dir"}, {}, extra_ro=["farm"]))
        self.assertEqual([s["op"] for s in p["/farm"]], ["mkdir", "bind"])
        self.assertEqual(p["/var/run"][0]["op"], "symlink")
        self.assertEqual(p["/var/tmp"][1]["op"], "scratch")
        self.assertEqual(p["/tmp"][1]["op"], "scratch")

    def test_sys_mirrors_the_hosts_cgroups_and_special_fs(self):
        mounts = [s for s in bed_plan.sys_plan(MOUNTINFO) if s["op"] == "mount"]
        got = [(s["path"], s["fstype"], s["data"]) for s in mounts]
        self.assertEqual(got, [("/sys/fs/cgroup", "tmpfs", "mode=755"),
                               ("/sys/fs/cgroup/cpu", "cgroup", "cpu"),
                               ("/sys/fs/cgroup/cpu,cpuacct", "cgroup", "cpu,cpuacct"),
                               ("/sys/fs/cgroup/systemd", "cgroup", "none,xattr,name=systemd"),
                               ("/sys/fs/cgroup/unified", "cgroup2", "nsdelegate"),
                               ("/sys/fs/bpf", "bpf", "mode=700")])
        self.assertTrue(all(s["optional"] for s in mounts))

    def test_v1_hierarchies_the_kernel_lacks_are_left_to_v2(self):
        config = "CONFIG_MEMCG=y\n# CONFIG_MEMCG_V1 is not set\nCONFIG_CPUSETS_V1=y\n"
        self.assertEqual(bed_plan.v1_missing(config), ["memory"])
        self.assertEqual(bed_plan.v1_missing("CONFIG_MEMCG=y\n"), [])  # 6.1: v1 always there
        text = MOUNTINFO + "50 31 0:50 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        points = [s["path"] for s in bed_plan.sys_plan(text, ["memory"]) if s["op"] == "mount"]
        self.assertNotIn("/sys/fs/cgroup/memory", points)
        self.assertIn("/sys/fs/cgroup/cpu", points)

    def test_binds_parse_and_plan(self):
        self.assertEqual(bed_plan.parse_bind("/h/layers/:/var/lib/dsec-vmm/layers", lambda p: True),
                         ("/h/layers", "/var/lib/dsec-vmm/layers"))
        for bad in ("/a", "a:/b", "/a:b", "/a:/"):
            with self.assertRaises(ValueError):
                bed_plan.parse_bind(bad, lambda p: True)
        with self.assertRaises(ValueError):
            bed_plan.parse_bind("/a:/b", lambda p: False)
        self.assertEqual(bed_plan.bind_plan([("/a", "/x/y")], [("/b", "/z")]),
                         [{"op": "mkdir", "path": "/x/y", "mode": 0o755},
                          {"op": "overlay", "src": "/a", "path": "/x/y"},
                          {"op": "mkdir", "path": "/z", "mode": 0o755},
                          {"op": "copy", "src": "/b", "path": "/z"}])

    def test_cwd_must_be_shared(self):
        self.assertEqual(bed_plan.unshared_reason("/work/main/build"), "")
        self.assertEqual(bed_plan.unshared_reason("/var/lib/dsec-vmm"), "")
        self.assertEqual(bed_plan.unshared_reason("/"), "")
        self.assertIn("fresh", bed_plan.unshared_reason("/tmp/x"))
        self.assertIn("fresh", bed_plan.unshared_reason("/var/tmp"))
        self.assertIn("not shared", bed_plan.unshared_reason("/farm/x"))
        self.assertEqual(bed_plan.unshared_reason("/farm/x", ["farm"]), "")

    def test_a_checkout_anywhere_is_shared_with_an_upper(self):
        # CI checks the project out under /check: that directory (and the
        # current one's) must be in L1, writable there.
        self.assertEqual(bed_plan.checkout_overlays(["/check/work/main/build", "/check/work/main"]),
                         ["check"])
        self.assertEqual(bed_plan.checkout_overlays(["/work/main/build", "/farm/x", "/check/y"]),
                         ["farm", "check"])
        # Already shared, fresh or the kernel's: nothing added.
        self.assertEqual(bed_plan.checkout_overlays(["/work/main", "/usr/src", "/etc/x", "/"]), [])
        self.assertEqual(bed_plan.checkout_overlays(["/tmp/x", "/run/y", "/proc/1", "/var/tmp"]), [])
        self.assertIn("fresh", bed_plan.unshared_reason("/tmp/x", bed_plan.checkout_overlays(["/tmp/x"])))
        steps = bed_plan.root_plan({"check": "dir", "work": "dir"}, {}, extra_overlay=["check"])
        self.assertIn({"op": "overlay", "src": "/check", "path": "/check"}, steps)


class QemuArgsTest(unittest.TestCase):
    def test_cpu_model_for_qmp(self):
        self.assertEqual(bed.cpu_model("EPYC"), {"name": "EPYC"})
        self.assertEqual(bed.cpu_model("qemu64,+svm,-x2apic,npt=on,model-id=x"),
                         {"name": "qemu64", "props": {"svm": True, "x2apic": False, "npt": True, "model-id": "x"}})

    def test_qemu_gets_the_host_root_read_only_and_no_network(self):
        m = {"kernel": "/c/kernel", "initrd": "/c/initrd.gz"}
        a = bed.qemu_argv("qemu", m, "/t", "/t/share", "EPYC", 4096, 2, "/t/scratch.ext4")
        joined = " ".join(a)
        self.assertIn("-no-reboot", a)
        self.assertIn("-nodefaults", a)  # no NIC: L1 sends nothing
        self.assertIn("local,path=/,mount_tag=hostroot,security_model=none,readonly=on", joined)
        self.assertIn("local,path=/t/share,mount_tag=results,security_model=none", joined)
        for port in bed.PORTS:
            self.assertIn("name=%s" % port, joined)
        self.assertIn("file=/t/scratch.ext4,format=raw", joined)
        self.assertIn("serial=" + bed_plan.SCRATCH_SERIAL, joined)

    @unittest.skipUnless(shutil.which("mkfs.ext4", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"),
                         "no mkfs.ext4")
    def test_scratch_disk_is_a_sparse_ext4_image(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.ext4")
            self.assertTrue(bed.make_scratch(path, 16))
            st = os.stat(path)
            self.assertEqual(st.st_size, 16 << 30)
            self.assertLess(st.st_blocks * 512, 64 << 20, "sparse")
            with open(path, "rb") as f:
                f.seek(1024 + 0x38)
                self.assertEqual(f.read(2), b"\x53\xef")  # ext2/3/4 superblock magic


class CliTest(unittest.TestCase):
    def test_skips_without_qemu(self):
        r = subprocess.run([sys.executable, bed.__file__, "run", "--", "true"], env={"PATH": "/nonexistent"},
                           capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 77, r.stderr)
        self.assertTrue(r.stderr.startswith("SKIP: qemu-system-x86_64 not found"), r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1)

    def test_refuses_a_cwd_that_l1_does_not_have(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, bed.__file__, "run", "--", "true"], cwd=tmp,
                               env={"PATH": os.path.dirname(shutil.which("true") or "/bin/true") + ":/usr/bin"},
                               capture_output=True, text=True, check=False)
        if r.returncode == 77:
            self.skipTest(r.stderr.strip())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("does not exist in L1", r.stderr)


class FakeQmp:
    """A QMP server on a unix socket: greets, answers every command, records
    them; `drop_first` connections are closed right after the greeting."""

    def __init__(self, path, drop_first=0):
        self.path, self.drop_first = path, drop_first
        self.commands, self.connections = [], 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(1)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with c, c.makefile("rwb") as f:
                f.write(b'{"QMP": {"version": {}}}\n')
                f.flush()
                if self.connections <= self.drop_first:
                    continue
                for line in f:
                    self.commands.append(json.loads(line))
                    f.write(b'{"return": {}}\n')
                    f.flush()

    def close(self):
        self.sock.close()


class KickerTest(unittest.TestCase):
    def test_sends_a_shift_press_and_release_each_period_and_reconnects(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "qmp.sock")
            k = bed.Kicker(path, 0.05)
            k.start()  # before QEMU listens: it retries
            time.sleep(0.1)
            qmp = FakeQmp(path, drop_first=1)
            try:
                deadline = time.monotonic() + 10
                while k.kicks < 3 and time.monotonic() < deadline:
                    time.sleep(0.05)
                k.stop()
                self.assertFalse(k.is_alive())
                self.assertGreaterEqual(k.kicks, 3)
                self.assertGreaterEqual(qmp.connections, 2)  # the dropped one, then a good one
                self.assertEqual(qmp.commands[0], {"execute": "qmp_capabilities"})
                kicks = [c for c in qmp.commands if c["execute"] == "input-send-event"]
                self.assertEqual(len(kicks), k.kicks)
                events = kicks[0]["arguments"]["events"]
                self.assertEqual([e["data"]["down"] for e in events], [True, False])
                self.assertEqual({e["data"]["key"]["data"] for e in events}, {"shift"})
            finally:
                qmp.close()


if __name__ == "__main__":
    unittest.main()

# SPDX-License-Identifier: Apache-2.0
"""A microVM sandbox with a network, end to end through the SDK and a real
daemon: the tap the daemon makes, the tap filter on it, the guest's eth0
configured by its PID 1 (dsec.net), and cleanup; a fork of it whose
child, restored from the saved machine, has a tap and an address of its
own. Runs where guest kernel
code is not emulated: in L1 of the nested bed (ctest
nested_microvm_network_test); on this PVM host the tier answers 503 and the
module skips with the reason.

All traffic stays on the machine: the guest connects to listeners of this
process on the sandbox's gateway address (the host end of its tap).
"""

import ipaddress
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import harness
import libdsec
from conftest import require_daemon

STORE = os.environ.get("DSEC_LAYER_STORE", "/var/lib/dsec-vmm/layers")
BASE = "base:bookworm"
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SUBNET = "10.253.%d.0/24" % (os.getpid() % 250)
GATEWAY = str(ipaddress.IPv4Network(SUBNET).network_address + 1)
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


def _agent():
    return os.path.join(os.path.dirname(os.environ["DSEC_VMMD"]), "guest-kernel", "agent", "dsec-agent")


def tap_of(address):
    """The host end of a sandbox's tap (sandbox/network: "ds" + the address in hex)."""
    return "ds%08x" % int(ipaddress.IPv4Address(address))


@pytest.fixture(scope="module")
def node():
    require_daemon()
    if not os.path.exists(_agent()):
        pytest.skip("no dsec-agent at %s" % _agent())
    probe = subprocess.run([os.environ["DSEC_VMMD"].replace("dsec-vmmd", "dsec-vmm"), "layer",
                            "--store", STORE, "inspect", BASE], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("no %s in %s (tools/setup.sh builds it)" % (BASE, STORE))
    tmp = tempfile.mkdtemp(prefix="dsec-sdkpy-mvmnet-")
    d = None
    try:
        rootfs = os.path.join(tmp, "rootfs.erofs")
        r = subprocess.run([os.path.join(SOURCE, "tools", "build-guest-image.sh"), _agent(), rootfs],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        d = harness.Daemon(tmp, store=STORE, extra_args=[
            "--microvm-rootfs", rootfs, "--microvm-state-dir", os.path.join(tmp, "microvm"),
            "--net-subnet", SUBNET, "--net-uplink", "none"])
        health = d.start()
        if not (health.get("network") or {}).get("available", True):
            pytest.skip("the node's network is not available: %s" % health["network"].get("reason"))
        yield d
    finally:
        if d is not None:
            d.stop()
        out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout \
            if shutil.which("nft") else ""
        net = ipaddress.IPv4Network(SUBNET)
        assert "dsec_vmm_%08x_%d" % (int(net.network_address), net.prefixlen) not in out, \
            "the daemon left its nftables table"
        shutil.rmtree(tmp, ignore_errors=True)


class Listener:
    """A TCP listener of this process on the gateway address (IP_FREEBIND:
    the address exists only while a sandbox's tap carries it)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        self.sock.bind((GATEWAY, 0))
        self.sock.listen(4)
        self.sock.settimeout(60)
        self.port = self.sock.getsockname()[1]

    def accept_line(self):
        conn, peer = self.sock.accept()
        with conn:
            conn.settimeout(30)
            return peer[0], conn.recv(64)


def test_a_networked_microvm_reaches_what_its_policy_allows_and_no_more(node):
    allowed, refused = Listener(), Listener()
    t0 = time.monotonic()
    try:
        sb = libdsec.Sandbox.create(tier="microvm", layers=[BASE], socket=node.socket, timeout=600,
                                    network={"egress": {"allow": ["%s:%d" % (GATEWAY, allowed.port)]}})
    except libdsec.DsecError as e:
        if e.status == 503:
            pytest.skip("microvm tier or network unavailable here: %s" % e)
        raise
    print("create with network: %.1f s" % (time.monotonic() - t0))
    address = sb.network.address
    tap = tap_of(address)
    try:
        assert sb.network.gateway == GATEWAY
        assert os.path.exists("/sys/class/net/%s" % tap), "no tap %s on the host" % tap
        # eth0 as PID 1 configured it, and the node resolver in resolv.conf.
        # (operstate lags: the kernel's link watch runs up to a second later.)
        r = sb.commands.run("cat /sys/class/net/eth0/flags /etc/resolv.conf; "
                            "grep -c %s /proc/net/fib_trie; cat /proc/net/route" % address)
        assert r.exit_code == 0, r.stderr
        lines = r.stdout.splitlines()
        assert int(lines[0], 16) & 1, r.stdout  # IFF_UP
        assert lines[1] == "nameserver %s" % GATEWAY, r.stdout
        assert int(lines[2]) >= 1, r.stdout
        gw_hex = "%08X" % int.from_bytes(socket.inet_aton(GATEWAY), "little")
        assert any(l.split()[:3] == ["eth0", "00000000", gw_hex] for l in lines[3:]), r.stdout

        # Allowed: the connection arrives from the sandbox's own address.
        r = sb.commands.run(["bash", "-c", "echo hi > /dev/tcp/%s/%d" % (GATEWAY, allowed.port)], timeout=60)
        assert r.exit_code == 0, r.stderr
        assert allowed.accept_line() == (address, b"hi\n")

        # Refused: the tap filter's RST ends it at once (a dropped SYN would
        # take minutes of retries), and the listener never sees it.
        t = time.monotonic()
        r = sb.commands.run(["bash", "-c", "echo hi > /dev/tcp/%s/%d" % (GATEWAY, refused.port)], timeout=60)
        took = time.monotonic() - t
        assert r.exit_code != 0 and "Connection refused" in r.stderr, (r.exit_code, r.stderr)
        assert took < 20, "refused after %.1f s" % took
        refused.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            refused.sock.accept()

        c = sb.refresh().network.counters
        assert c.connects_allowed >= 1 and c.connects_denied >= 1, c
        assert c.bytes_out > 0 and c.bytes_in > 0, c
    finally:
        assert sb.kill() is True
    assert not os.path.exists("/sys/class/net/%s" % tap), "the tap outlived its sandbox"


def _addresses(sb):
    """The guest's own IPv4 addresses (the kernel's local routes)."""
    r = sb.commands.run("awk '/32 host LOCAL/ {print prev} {prev=$2}' /proc/net/fib_trie")
    assert r.exit_code == 0, r.stderr
    return sorted(set(r.stdout.split()) - {"127.0.0.1"})


def test_a_forked_networked_microvm_child_gets_its_own_tap_and_address(node):
    listener = Listener()
    allow = {"egress": {"allow": ["%s:%d" % (GATEWAY, listener.port)]}}
    try:
        src = libdsec.Sandbox.create(tier="microvm", layers=[BASE], socket=node.socket, timeout=600,
                                     memory_mib=256, request_timeout=300, network=allow)
    except libdsec.DsecError as e:
        if e.status == 503:
            pytest.skip("microvm tier or network unavailable here: %s" % e)
        raise
    children = []
    try:
        address = src.network.address
        # The source has talked to its gateway: the guest's neighbour table
        # holds the source tap's MAC, which a child must not keep.
        connect = ["bash", "-c", "echo hi > /dev/tcp/%s/%d" % (GATEWAY, listener.port)]
        r = src.commands.run(connect, timeout=60)
        assert r.exit_code == 0, r.stderr
        assert listener.accept_line() == (address, b"hi\n")

        t0 = time.monotonic()
        children = src.fork(1, timeout=600)
        print("fork of a networked microVM: %.1f s" % (time.monotonic() - t0))
        assert children.forked == "machine", children.processes
        child = children[0]
        child_address = child.network.address
        assert child_address != address
        assert os.path.exists("/sys/class/net/%s" % tap_of(child_address)), "no tap for the child"
        # The child's eth0 holds its own address only, and its default route.
        assert _addresses(child) == [child_address]
        r = child.commands.run("cat /proc/net/route /etc/resolv.conf")
        gw_hex = "%08X" % int.from_bytes(socket.inet_aton(GATEWAY), "little")
        assert any(l.split()[:3] == ["eth0", "00000000", gw_hex] for l in r.stdout.splitlines()), r.stdout
        assert "nameserver %s" % GATEWAY in r.stdout, r.stdout

        # Its policy is the source's, on its own tap; its connections come
        # from its own address. The source goes on with its own.
        r = child.commands.run(connect, timeout=60)
        assert r.exit_code == 0, r.stderr
        assert listener.accept_line() == (child_address, b"hi\n")
        r = src.commands.run(connect, timeout=60)
        assert r.exit_code == 0, r.stderr
        assert listener.accept_line() == (address, b"hi\n")
        assert _addresses(src) == [address]

        # A sandbox made from a snapshot of it: the same, through the
        # snapshot's record.
        snapshot = src.snapshot()
        again = libdsec.Sandbox.create(snapshot=snapshot, socket=node.socket, timeout=600,
                                       request_timeout=300)
        children.append(again)
        assert again.network.address not in (address, child_address)
        assert _addresses(again) == [again.network.address]
        r = again.commands.run(connect, timeout=60)
        assert r.exit_code == 0, r.stderr
        assert listener.accept_line() == (again.network.address, b"hi\n")
        libdsec.Client(socket_path=node.socket).delete_snapshot(snapshot)
    finally:
        for c in children:
            assert c.kill() is True
        assert src.kill() is True
    for sb in [src] + list(children):
        assert not os.path.exists("/sys/class/net/%s" % tap_of(sb.network.address)), "a tap outlived its sandbox"

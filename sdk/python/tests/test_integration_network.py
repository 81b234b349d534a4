# SPDX-License-Identifier: Apache-2.0
"""Sandbox networking with an egress policy, end to end through libdsec.

A private daemon on a /24 of its own (10.252.<pid % 250>.0/24) and no
uplink (`--net-uplink none`: sandboxes reach only this node), so no packet
leaves the machine. The test process listens on the sandbox's gateway
address (the host end of its veth) and the sandbox connects to it with
busybox nc: refused at once with EPERM while the policy allows nothing,
let through after set_network allows that address and port, refused
again for another port and after the policy is emptied. Also checked: the
address, gateway and nameserver the API reports (eth0's address,
/etc/resolv.conf), the counters in GET and /metrics, health's network,
bad rules named by field (create and PATCH), PATCH on a sandbox without a
network (Conflict), a fncall sandbox's network (its workers share the
policy; nc through busybox's sh standing in for bash), and the asyncio
client. After the daemon stops, no veth, nftables table, mount, cgroup or
process of these sandboxes is left.

Skips with the reason without the daemon's prerequisites (conftest), on a
daemon without networking, when health says the node's network is not
available, or when the node answers a networked create with 503 (it
cannot enforce a policy here).
"""

import asyncio
import ipaddress
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading

import pytest

import harness
import libdsec
from conftest import require_daemon

SUBNET = "10.252.%d.0/24" % (os.getpid() % 250)
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


class NetNode:
    def __init__(self, daemon, base):
        self.daemon = daemon
        self.socket = daemon.socket
        self.base = base
        self.created = set()
        self.addresses = set()
        self.client = daemon.client(timeout=120)

    def track(self, sb):
        self.created.add(sb.id)
        if sb.network is not None and sb.network.address:
            self.addresses.add(sb.network.address)
        return sb

    def create(self, **kw):
        """Sandbox.create on this node; skips when the node cannot give a network (503)."""
        try:
            kw.setdefault("tier", "container")
            return self.track(libdsec.Sandbox.create(layers=[self.base], client=self.client,
                                                     timeout=600, **kw))
        except libdsec.Unavailable as e:
            pytest.skip("the node cannot give sandboxes a network here: %s" % e.message)


def host_interface(address):
    """The host end of a sandbox's veth (sandbox/network: "ds" + the address in hex)."""
    return "ds%08x" % int(ipaddress.IPv4Address(address))


def network_leaks(addresses):
    leaks = {}
    veths = sorted(i for i in map(host_interface, addresses)
                   if os.path.exists(os.path.join("/sys/class/net", i)))
    if veths:
        leaks["veths"] = veths
    nft = shutil.which("nft")
    if nft:
        net = ipaddress.IPv4Network(SUBNET)
        table = "dsec_vmm_%08x_%d" % (int(net.network_address), net.prefixlen)
        out = subprocess.run([nft, "list", "tables"], capture_output=True, text=True,
                             timeout=30).stdout
        if table in out:
            leaks["nft_tables"] = [table]
    return leaks


@pytest.fixture(scope="module")
def net_node():
    require_daemon()
    tmp = tempfile.mkdtemp(prefix="dsec-sdkpy-net-")
    d = None
    n = None
    try:
        out = subprocess.run([os.environ["DSEC_VMMD"], "--help"], capture_output=True,
                             text=True, timeout=30)
        help_text = out.stdout + out.stderr
        if not harness.offers(help_text, "--net-subnet"):
            pytest.skip("this dsec-vmmd offers no sandbox networking (no --net-subnet)")
        d = harness.Daemon(tmp, extra_args=["--net-subnet", SUBNET, "--net-uplink", "none"])
        health = d.start()
        net = health.get("network") or {}
        if not net.get("available"):
            pytest.skip("the node's network is not available: %s"
                        % net.get("reason", "health has no network"))
        tree = os.path.join(tmp, "busybox-tree")
        harness.build_busybox_tree(tree)
        c = d.client(timeout=300)
        name = "sdkpy-net-bb-" + secrets.token_hex(4)
        c.build_layer(name, "1", tree)
        c.close()
        n = NetNode(d, name + ":1")
        yield n
    finally:
        if n is not None:
            for sid in n.created:
                try:
                    n.client.delete(sid)
                except libdsec.DsecError:
                    pass
            n.client.close()
        leaks = {}
        if d is not None:
            d.stop()
            leaks = harness.host_leaks(tmp, n.created if n else ())
            leaks.update(network_leaks(n.addresses if n else ()))
        if "mounts" not in leaks:  # never delete through a leaked mount
            shutil.rmtree(tmp, ignore_errors=True)
        if leaks:
            raise AssertionError("the node daemon left %r" % leaks)


class Listener:
    """A TCP listener of the test process on the sandbox's gateway address.

    The address exists on the host while a networked sandbox lives (its
    veth's host end); IP_FREEBIND lets the bind not depend on that."""

    def __init__(self, address):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        self.sock.bind((address, 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.received = []

    def pending(self):
        """Whether a connection is waiting to be accepted (never blocks)."""
        self.sock.setblocking(False)
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return False
        finally:
            self.sock.setblocking(True)
        conn.close()
        return True

    def serve_one(self):
        """Accepts one connection in a thread: reads a line, answers "ok"."""
        def run():
            self.sock.settimeout(30)
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(30)
                try:
                    self.received.append(conn.recv(64))
                    conn.sendall(b"ok\n")
                except OSError:
                    pass
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def close(self):
        self.sock.close()


def connect(sb, address, port):
    """busybox nc from inside the sandbox; its CommandResult."""
    return sb.commands.run("echo hi | nc -w 5 %s %d" % (address, port), timeout=30)


def denied(r):
    return r.exit_code != 0 and "Operation not permitted" in (r.stdout + r.stderr)


def metric(text, name, sandbox_id):
    key = '%s{sandbox="%s"} ' % (name, sandbox_id)
    for line in text.splitlines():
        if line.startswith(key):
            return int(float(line[len(key):]))
    return None


def test_policy_allows_nothing_then_what_set_network_allows(net_node):
    n = net_node
    sb = n.create(network={})  # a network where nothing outside is allowed
    net = sb.network
    assert isinstance(net, libdsec.NetworkInfo), sb.info
    subnet = ipaddress.IPv4Network(SUBNET)
    assert ipaddress.IPv4Address(net.address) in subnet
    assert net.gateway == str(next(subnet.hosts())) and net.nameserver == net.gateway
    assert (net.allow, net.deny) == ([], [])
    assert net.counters is not None

    # What the sandbox sees matches what the API says.
    r = sb.commands.run("cat /etc/resolv.conf; cat /proc/net/dev; ip addr show eth0")
    assert r.exit_code == 0, r
    assert "nameserver %s" % net.gateway in r.stdout
    assert "eth0:" in r.stdout
    assert "inet %s/" % net.address in r.stdout

    health = n.client.health()["network"]
    assert (health["available"], health["active"], health["subnet"]) == (True, True, SUBNET)
    assert health["sandboxes"] >= 1 and health["uplinks"] == []

    lis = Listener(net.gateway)
    try:
        # Denied at once with EPERM, and nothing reached the listener.
        r = connect(sb, net.gateway, lis.port)
        assert denied(r), r
        assert not lis.pending()
        assert sb.refresh().network.counters.connects_denied >= 1

        # Allowed for new connections as soon as set_network answers.
        rule = "%s:%d" % (net.gateway, lis.port)
        assert sb.set_network(allow=[rule]) is sb
        assert (sb.network.allow, sb.network.deny) == ([rule], [])
        server = lis.serve_one()
        r = connect(sb, net.gateway, lis.port)
        server.join(30)
        assert r.exit_code == 0 and "ok" in r.stdout, r
        assert lis.received and lis.received[0].startswith(b"hi"), lis.received

        # Only that port.
        assert denied(connect(sb, net.gateway, lis.port + 1 if lis.port < 65535 else 1))

        counters = sb.refresh().network.counters
        assert counters.connects_allowed >= 1 and counters.connects_denied >= 2, counters
        assert counters.bytes_out > 0, counters
        text = n.client.metrics()
        assert metric(text, "dsec_sandbox_network_connects_denied_total", sb.id) >= 2
        assert metric(text, "dsec_sandbox_network_connects_allowed_total", sb.id) >= 1
        for name in ("bytes_out", "bytes_in", "packets_dropped"):
            assert metric(text, "dsec_sandbox_network_%s_total" % name, sb.id) is not None

        # An empty policy again: refused again.
        sb.set_network()
        assert sb.network.allow == []
        assert denied(connect(sb, net.gateway, lis.port))
        assert not lis.pending()
    finally:
        lis.close()
    veth = host_interface(net.address)
    assert os.path.exists(os.path.join("/sys/class/net", veth))
    assert sb.kill() is True
    # DELETE answers once the network is closed: its veth is gone, its
    # counters are out of /metrics.
    assert not os.path.exists(os.path.join("/sys/class/net", veth))
    assert metric(n.client.metrics(), "dsec_sandbox_network_connects_denied_total",
                  sb.id) is None


def test_bad_rules_are_refused_naming_the_field(net_node):
    n = net_node
    before = {h.id for h in n.client.list()}
    with pytest.raises(libdsec.InvalidArgument) as e:
        n.create(allow=["192.0.2.7", "no spaces allowed"])
    assert e.value.field == "network.egress.allow[1]", e.value
    assert {h.id for h in n.client.list()} == before  # nothing made

    sb = n.create(allow=["192.0.2.7:443"], deny=["*.example.com"])
    assert (sb.network.allow, sb.network.deny) == (["192.0.2.7:443"], ["*.example.com"])
    with pytest.raises(libdsec.InvalidArgument) as e:
        sb.set_network(allow=["192.0.2.8"], deny=["also not a rule!"])
    assert e.value.field == "egress.deny[0]", e.value
    # The policy in force is the one before the refused change.
    assert sb.refresh().network.allow == ["192.0.2.7:443"]
    assert sb.kill() is True
    with pytest.raises(libdsec.NotFound):
        sb.handle.set_network(allow=[])


def test_a_sandbox_without_a_network_has_none_and_cannot_get_one_later(net_node):
    n = net_node
    sb = n.create()
    assert sb.network is None and sb.info["network"] is None
    r = sb.commands.run("cat /proc/net/dev")
    assert r.exit_code == 0 and "eth0" not in r.stdout, r
    with pytest.raises(libdsec.Conflict) as e:
        sb.set_network(allow=["192.0.2.7"])
    assert (e.value.status, e.value.code) == (409, "FAILED_PRECONDITION")
    assert sb.kill() is True


def test_a_fncall_sandbox_gets_a_network_its_workers_share(net_node):
    n = net_node
    if not n.client.health()["tiers"].get("fncall"):
        pytest.skip("the fncall tier is not available on this node")
    sb = n.create(tier="fncall", lang="bash", network={})
    net = sb.network
    assert isinstance(net, libdsec.NetworkInfo), sb.info
    assert ipaddress.IPv4Address(net.address) in ipaddress.IPv4Network(SUBNET)
    r = sb.exec("cat /etc/resolv.conf")
    assert r.exit_code == 0 and ("nameserver %s" % net.gateway).encode() in r.stdout, r
    lis = Listener(net.gateway)
    try:
        def nc(port):
            return sb.exec("echo hi | nc -w 5 %s %d" % (net.gateway, port), timeout_s=30)

        def refused(r):
            return r.exit_code != 0 and b"Operation not permitted" in r.stdout + r.stderr

        # Several calls (the pool's workers take turns): each is refused at
        # once, then let through after set_network.
        for _ in range(3):
            assert refused(nc(lis.port))
        assert not lis.pending()
        sb.set_network(allow=["%s:%d" % (net.gateway, lis.port)])
        for _ in range(3):
            server = lis.serve_one()
            r = nc(lis.port)
            server.join(30)
            assert r.exit_code == 0 and b"ok" in r.stdout, r
        counters = sb.refresh().network.counters
        assert counters.connects_allowed >= 3 and counters.connects_denied >= 3, counters
    finally:
        lis.close()
    addresses = sb.refresh().network.addresses
    assert net.address in addresses, sb.network
    n.addresses.update(addresses)
    assert sb.kill() is True
    for a in addresses:
        assert not os.path.exists(os.path.join("/sys/class/net", host_interface(a))), a


def test_asyncio_client(net_node):
    n = net_node

    async def go():
        async with libdsec.AsyncClient(socket_path=n.socket, timeout=120) as client:
            try:
                sb = await libdsec.AsyncSandbox.create(tier="container", layers=[n.base],
                                                       allow=[], client=client, timeout=600)
            except libdsec.Unavailable as e:
                pytest.skip("the node cannot give sandboxes a network here: %s" % e.message)
            n.track(sb)
            assert ipaddress.IPv4Address(sb.network.address) in ipaddress.IPv4Network(SUBNET)
            r = await sb.commands.run("echo hi | nc -w 5 %s 9" % sb.network.gateway)
            assert denied(r), r
            rule = "%s:9" % sb.network.gateway
            assert await sb.set_network(allow=[rule]) is sb
            assert sb.network.allow == [rule]
            assert (await client.get(sb.id)).network.allow == [rule]
            with pytest.raises(libdsec.InvalidArgument) as e:
                await sb.set_network(allow=["nope nope"])
            assert e.value.field == "egress.allow[0]"
            assert await sb.kill() is True

    asyncio.run(go())

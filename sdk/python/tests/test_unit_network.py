# SPDX-License-Identifier: Apache-2.0
"""Unit tests of sandbox networking in the SDK against the fake daemon:
network= and allow=/deny= on every create path, sb.network parsed into
NetworkInfo/NetworkCounters, set_network (PATCH .../network), the checks
made before sending, and the daemon's errors as the SDK's exceptions;
blocking and asyncio alike."""

import asyncio
import functools

import pytest

from fake_daemon import FakeDaemon, network_obj, sandbox_obj

import libdsec

POLICY = {"egress": {"allow": ["10.1.0.0/16:443", "pypi.org:443", "*.debian.org"],
                     "deny": ["10.1.2.0/24"]}}


def run(coro_fn):
    @functools.wraps(coro_fn)
    def wrapper(*args, **kw):
        return asyncio.run(coro_fn(*args, **kw))
    return wrapper


@pytest.fixture
def fake():
    f = FakeDaemon()
    yield f
    f.close()


@pytest.fixture
def client(fake):
    c = libdsec.Client(socket_path=fake.socket_path)
    yield c
    c.close()


def networked(sid="sb-n", **kw):
    return sandbox_obj(sid, network=network_obj(**kw))


# -- create ------------------------------------------------------------------------


def test_create_sends_network_as_given(fake):
    fake.reply(201, networked(allow=POLICY["egress"]["allow"], deny=["10.1.2.0/24"]))
    sb = libdsec.Sandbox.create(layers=["base:bookworm"], network=POLICY,
                                socket=fake.socket_path)
    assert fake.last().json == {"tier": "container", "layers": ["base:bookworm"],
                                "network": POLICY}
    assert sb.network is not None
    assert sb.network.allow == POLICY["egress"]["allow"]
    assert sb.network.deny == ["10.1.2.0/24"]
    assert sb.network.egress == POLICY["egress"]
    fake.reply(204)
    sb.kill()


def test_allow_and_deny_are_shorthand_for_the_egress_object(fake, client):
    fake.reply(201, networked())
    libdsec.Sandbox.create(allow=("pypi.org:443",), deny=["10.0.0.0/8"], client=client)
    assert fake.last().json["network"] == {"egress": {"allow": ["pypi.org:443"],
                                                      "deny": ["10.0.0.0/8"]}}
    fake.reply(201, networked())
    libdsec.Sandbox.create(allow=[], client=client)  # a network where nothing is allowed
    assert fake.last().json["network"] == {"egress": {"allow": []}}
    fake.reply(201, networked())
    libdsec.Sandbox.create(deny=["*.example.com"], client=client)
    assert fake.last().json["network"] == {"egress": {"deny": ["*.example.com"]}}


def test_an_empty_network_is_sent_and_none_is_not(fake, client):
    fake.reply(201, networked())
    client.create(network={})
    assert fake.last().json == {"tier": "container", "network": {}}
    fake.reply(201, sandbox_obj("sb-plain"))
    h = client.create(network=None)
    assert fake.last().json == {"tier": "container"}
    assert h.network is None


def test_every_create_path_takes_network(fake, client):
    body = {"egress": {"allow": ["192.0.2.7"]}}
    fake.reply(201, networked())
    client.create(tier="container", network=body)
    fake.reply(201, networked())
    libdsec.Sandbox(tier="container", allow=["192.0.2.7"], client=client)  # compatibility
    fake.reply(201, networked(recorded=0))
    client.resume("t-1", network=body)
    fake.reply(201, networked(recorded=0))
    libdsec.Task("t-2", client=client).resume(allow=["192.0.2.7"])
    fake.reply(201, networked())
    libdsec.Task("t-3", client=client).sandbox(network=body)
    assert [r.json.get("network") for r in fake.requests] == [body] * 5
    assert [r.path for r in fake.requests] == [
        "/v1/sandboxes", "/v1/sandboxes", "/v1/tasks/t-1/resume", "/v1/tasks/t-2/resume",
        "/v1/sandboxes"]


def test_network_and_allow_together_is_a_type_error(fake, client):
    with pytest.raises(TypeError, match="not both"):
        libdsec.Sandbox.create(network={}, allow=["pypi.org"], socket=fake.socket_path)
    with pytest.raises(TypeError):
        client.create(network=POLICY, deny=[])
    assert fake.requests == []


@pytest.mark.parametrize("kw, field", [
    ({"allow": "pypi.org:443"}, "network.egress.allow"),          # a str, not a list
    ({"deny": {"10.0.0.0/8"}}, "network.egress.deny"),            # a set: no order
    ({"allow": ["ok.org", 443]}, "network.egress.allow[1]"),
    ({"network": ["egress"]}, "network"),
    ({"network": {"egress": {"allow": "x.org"}}}, "network.egress.allow"),
    ({"network": {"egress": {"deny": [None]}}}, "network.egress.deny[0]"),
])
def test_rule_lists_that_are_not_lists_of_str_are_refused_before_sending(fake, client, kw,
                                                                         field):
    with pytest.raises(libdsec.InvalidArgument) as e:
        client.create(**kw)
    assert e.value.field == field
    assert e.value.status is None  # the SDK's own check
    assert fake.requests == []


def test_rule_syntax_is_left_to_the_daemon(fake, client):
    fake.error(400, "INVALID_ARGUMENT", "not a CIDR or domain rule: 'pypi..org'",
               field="network.egress.allow[2]")
    with pytest.raises(libdsec.InvalidArgument) as e:
        client.create(allow=["pypi.org", "10.0.0.0/8", "pypi..org"])
    assert (e.value.field, e.value.status) == ("network.egress.allow[2]", 400)
    assert fake.last().json["network"]["egress"]["allow"][2] == "pypi..org"


def test_create_errors_map_to_the_sdks_exceptions(fake, client):
    fake.error(400, "INVALID_ARGUMENT", "the microvm tier offers no network", field="network")
    with pytest.raises(libdsec.InvalidArgument) as e:
        client.create(tier="microvm", network={})
    assert e.value.field == "network"
    assert "offers no network" in e.value.message
    fake.error(503, "UNAVAILABLE", "cannot enforce an egress policy: BPF cgroup programs refused")
    with pytest.raises(libdsec.Unavailable) as e:
        libdsec.Sandbox.create(allow=[], client=client)
    assert e.value.status == 503 and "cannot enforce" in e.value.message


# -- what GET says --------------------------------------------------------------------


def test_network_is_parsed_into_typed_values(fake, client):
    counters = {"bytes_out": 120, "bytes_in": 4096, "connects_allowed": 2,
                "connects_denied": 3, "packets_dropped": 1}
    fake.reply(200, networked(allow=["pypi.org:443"], counters=counters, address="10.201.0.9",
                              gateway="10.201.0.1", extra="later field"))
    net = client.get("sb-n").network
    assert isinstance(net, libdsec.NetworkInfo)
    assert (net.allow, net.deny) == (["pypi.org:443"], [])
    assert (net.address, net.gateway, net.nameserver) == ("10.201.0.9", "10.201.0.1",
                                                          "10.201.0.1")
    assert net.counters == libdsec.NetworkCounters(bytes_out=120, bytes_in=4096,
                                                   connects_allowed=2, connects_denied=3,
                                                   packets_dropped=1)
    assert net.raw["extra"] == "later field"


def test_counters_are_none_while_the_sandbox_is_destroyed(fake, client):
    fake.reply(200, {"sandboxes": [networked("sb-1", counters=None), sandbox_obj("sb-2")]})
    a, b = client.list()
    assert a.network is not None and a.network.counters is None
    assert b.network is None


def test_a_daemon_without_the_field_means_no_network(fake, client):
    obj = sandbox_obj("sb-old")
    del obj["network"]
    fake.reply(200, obj)
    assert client.get("sb-old").network is None


def test_network_that_is_not_an_object_is_a_protocol_error(fake, client):
    fake.reply(200, sandbox_obj("sb-x", network="on"))
    with pytest.raises(libdsec.ProtocolError):
        client.get("sb-x")


def test_refresh_updates_the_counters(fake, client):
    fake.reply(201, networked())
    sb = libdsec.Sandbox.create(allow=[], client=client)
    assert sb.network.counters.connects_denied == 0
    fake.reply(200, networked(counters={"bytes_out": 0, "bytes_in": 0, "connects_allowed": 0,
                                        "connects_denied": 5, "packets_dropped": 0}))
    assert sb.refresh().network.counters.connects_denied == 5


# -- set_network -----------------------------------------------------------------------


def test_set_network_patches_the_whole_policy_and_refreshes(fake, client):
    fake.reply(201, networked())
    sb = libdsec.Sandbox.create(allow=[], client=client)
    fake.reply(200, networked(allow=["10.201.0.1:8080"]))
    assert sb.set_network(allow=["10.201.0.1:8080"]) is sb
    req = fake.last()
    assert (req.method, req.path) == ("PATCH", "/v1/sandboxes/sb-n/network")
    assert req.headers["content-type"] == "application/json"
    assert req.json == {"egress": {"allow": ["10.201.0.1:8080"], "deny": []}}
    assert sb.network.allow == ["10.201.0.1:8080"]
    fake.reply(200, networked())
    sb.set_network()  # nothing allowed
    assert fake.last().json == {"egress": {"allow": [], "deny": []}}
    fake.reply(200, networked(deny=["*.evil.example"]))
    sb.set_network(network={"egress": {"deny": ["*.evil.example"]}})
    assert fake.last().json == {"egress": {"deny": ["*.evil.example"]}}
    assert sb.network.deny == ["*.evil.example"]


def test_set_network_on_a_handle(fake, client):
    fake.reply(200, networked("a/b"))
    h = client.get("a/b")
    fake.reply(200, networked("a/b", allow=["pypi.org"]))
    assert h.set_network(["pypi.org"], ["10.0.0.0/8"]) is h
    assert fake.last().raw_path == "/v1/sandboxes/a%2Fb/network"
    assert fake.last().json == {"egress": {"allow": ["pypi.org"], "deny": ["10.0.0.0/8"]}}
    assert h.network.allow == ["pypi.org"]


def test_set_network_checks_types_before_sending(fake, client):
    fake.reply(200, networked())
    h = client.get("sb-n")
    with pytest.raises(libdsec.InvalidArgument) as e:
        h.set_network(allow="pypi.org")
    assert e.value.field == "egress.allow"
    with pytest.raises(libdsec.InvalidArgument) as e:
        h.set_network(deny=[b"10.0.0.0/8"])
    assert e.value.field == "egress.deny[0]"
    with pytest.raises(TypeError):
        h.set_network(allow=[], network={"egress": {}})
    assert len(fake.requests) == 1


def test_set_network_errors_map_to_the_sdks_exceptions(fake, client):
    fake.reply(200, networked())
    h = client.get("sb-n")
    fake.error(400, "INVALID_ARGUMENT", "bad port", field="egress.allow[0]")
    with pytest.raises(libdsec.InvalidArgument) as e:
        h.set_network(allow=["10.0.0.1:99999"])
    assert (e.value.field, e.value.status) == ("egress.allow[0]", 400)
    fake.error(409, "FAILED_PRECONDITION", "sandbox sb-n has no network")
    with pytest.raises(libdsec.Conflict) as e:
        h.set_network(allow=[])
    assert (e.value.code, e.value.status) == ("FAILED_PRECONDITION", 409)
    fake.error(404, "NOT_FOUND", "no sandbox sb-n")
    with pytest.raises(libdsec.NotFound):
        h.set_network(allow=[])
    fake.error(503, "UNAVAILABLE", "cannot enforce the policy")
    with pytest.raises(libdsec.Unavailable):
        h.set_network(allow=[])
    assert h.network.allow == []  # unchanged by the failures


def test_health_carries_the_node_network(fake, client):
    health = {"status": "ok", "version": "0.1.0", "tiers": {"container": True},
              "sandboxes": 0, "network": {"available": False, "subnet": "10.201.0.0/16",
                                          "uplinks": [], "active": False, "sandboxes": 0,
                                          "reason": "no BPF"}}
    fake.reply(200, health)
    assert client.health()["network"]["reason"] == "no BPF"


# -- asyncio -------------------------------------------------------------------------


@run
async def test_async_create_set_network_and_errors(fake):
    fake.reply(201, networked("sb-a"))
    sb = await libdsec.AsyncSandbox.create(allow=["pypi.org:443"], socket=fake.socket_path)
    assert fake.last().json["network"] == {"egress": {"allow": ["pypi.org:443"]}}
    assert isinstance(sb.network, libdsec.NetworkInfo)
    assert sb.network.counters.bytes_out == 0
    fake.reply(200, networked("sb-a", allow=["*.debian.org"], deny=["10.0.0.0/8"]))
    assert await sb.set_network(allow=["*.debian.org"], deny=["10.0.0.0/8"]) is sb
    req = fake.last()
    assert (req.method, req.path, req.json) == (
        "PATCH", "/v1/sandboxes/sb-a/network",
        {"egress": {"allow": ["*.debian.org"], "deny": ["10.0.0.0/8"]}})
    assert (sb.network.allow, sb.network.deny) == (["*.debian.org"], ["10.0.0.0/8"])
    fake.error(400, "INVALID_ARGUMENT", "bad rule", field="egress.deny[0]")
    with pytest.raises(libdsec.InvalidArgument) as e:
        await sb.set_network(deny=["10.0.0.0/33"])
    assert e.value.field == "egress.deny[0]"
    fake.error(409, "FAILED_PRECONDITION", "no network")
    with pytest.raises(libdsec.Conflict):
        await sb.set_network()
    with pytest.raises(TypeError):
        await sb.set_network(allow=[], network={})
    fake.reply(204)
    await sb.kill()


@run
async def test_async_create_paths_and_checks(fake):
    with pytest.raises(TypeError):
        await libdsec.AsyncSandbox.create(network={}, deny=[], socket=fake.socket_path)
    with pytest.raises(libdsec.InvalidArgument) as e:
        await libdsec.AsyncSandbox.create(allow="x.org", socket=fake.socket_path)
    assert e.value.field == "network.egress.allow"
    assert fake.requests == []
    async with libdsec.AsyncClient(socket_path=fake.socket_path) as client:
        fake.reply(201, networked(allow=POLICY["egress"]["allow"]))
        sb = await client.create(network=POLICY)
        assert fake.last().json["network"] == POLICY
        fake.reply(201, networked(recorded=0))
        await client.resume("t-1", allow=[])
        assert fake.last().json["network"] == {"egress": {"allow": []}}
        fake.reply(200, sandbox_obj("sb-plain"))
        assert (await client.get("sb-plain")).network is None
        fake.error(503, "UNAVAILABLE", "cannot enforce")
        with pytest.raises(libdsec.Unavailable):
            await client.create(network={})
        assert sb.network.allow == POLICY["egress"]["allow"]


def test_both_clients_send_the_same_bytes(fake):
    def script():
        fake.reply(201, networked("sb-p"))
        fake.reply(200, networked("sb-p"))

    script()
    c = libdsec.Client(socket_path=fake.socket_path)
    h = c.create(tier="container", network=POLICY)
    h.set_network(["pypi.org:443"], deny=["10.0.0.0/8"])
    c.close()

    async def go():
        async with libdsec.AsyncClient(socket_path=fake.socket_path) as ac:
            sb = await ac.create(tier="container", network=POLICY)
            await sb.set_network(["pypi.org:443"], deny=["10.0.0.0/8"])

    script()
    asyncio.run(go())
    sync, aio = fake.requests[:2], fake.requests[2:]
    keys = ("accept", "content-type", "content-length", "authorization")
    for s, a in zip(sync, aio):
        assert (s.method, s.raw_path, s.body) == (a.method, a.raw_path, a.body)
        assert {k: s.headers.get(k) for k in keys} == {k: a.headers.get(k) for k in keys}

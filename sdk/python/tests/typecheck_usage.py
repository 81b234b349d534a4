# SPDX-License-Identifier: Apache-2.0
"""Not run: type-checked by typecheck.py. The public API as a typed caller
uses it; assert_type fails the check if a declared type drifts."""

from typing import List, Optional, Tuple, Union, assert_type

import libdsec


def blocking() -> None:
    sb = libdsec.Sandbox.create(tier="container", layers=["base:bookworm"], timeout=60)
    assert_type(sb, libdsec.Sandbox)
    assert_type(sb.sandbox_id, str)
    r = sb.commands.run("make", on_stdout=print, on_stderr=lambda s: None, timeout=2.5,
                        envs={"A": "1"}, cwd="/work", stdin=b"\x00")
    assert_type(r, libdsec.CommandResult)
    assert_type(r.exit_code, Optional[int])
    assert_type(r.stdout, str)
    assert_type(r.stdout_bytes, bytes)
    assert_type(r.error, Optional[str])
    assert_type(r.check(), libdsec.CommandResult)
    assert_type(sb.files.read("/a", format="text"), str)
    assert_type(sb.files.read("/a", format="bytes"), bytes)
    assert_type(sb.files.read("/a"), Union[str, bytes])
    assert_type(sb.files.list("/"), List[libdsec.FileEntry])
    sb.files.write("/a", "text")
    sb.files.write("/b", b"bytes")
    with open("/etc/hostname", "rb") as f:
        sb.files.write("/c", f)
    assert_type(sb.pause(), libdsec.Sandbox)
    assert_type(sb.is_running(), bool)
    assert_type(sb.kill(), bool)
    with libdsec.Sandbox.connect("sb-1", socket="/run/x.sock") as c:
        assert_type(c, libdsec.Sandbox)
    # The earlier API keeps its types.
    old = libdsec.Sandbox(tier="fncall")
    assert_type(old.exec("print(1)").stdout, bytes)
    for chunk in old.exec_stream(["x"]):
        assert_type(chunk, Tuple[str, bytes])
    handle = libdsec.Client().get("sb-1")
    assert_type(handle, libdsec.SandboxHandle)
    assert_type(handle.read_file("/a"), bytes)


def network() -> None:
    sb = libdsec.Sandbox.create(allow=["pypi.org:443"], deny=("10.0.0.0/8",))
    libdsec.Sandbox.create(network={"egress": {"allow": ["*.debian.org"]}})
    libdsec.Sandbox(tier="container", network={})
    assert_type(sb.network, Optional[libdsec.NetworkInfo])
    net = sb.network
    if net is not None:
        assert_type(net.allow, List[str])
        assert_type(net.address, Optional[str])
        assert_type(net.counters, Optional[libdsec.NetworkCounters])
        if net.counters is not None:
            assert_type(net.counters.connects_denied, int)
    assert_type(sb.set_network(allow=["10.1.0.0/16:443"], deny=[]), libdsec.Sandbox)
    assert_type(sb.set_network(network={"egress": {}}), libdsec.Sandbox)
    handle = libdsec.Client().create(allow=[])
    assert_type(handle.set_network(["pypi.org"]), libdsec.SandboxHandle)
    assert_type(handle.network, Optional[libdsec.NetworkInfo])


async def on_output(text: str) -> None:
    print(text)


async def asynchronous() -> None:
    async with await libdsec.AsyncSandbox.create(tier="fncall", timeout=30) as sb:
        assert_type(sb, libdsec.AsyncSandbox)
        r = await sb.commands.run("print(1)", on_stdout=on_output, on_stderr=print)
        assert_type(r, libdsec.CommandResult)
        assert_type(await sb.files.read("/a"), str)
        assert_type(await sb.files.read("/a", format="bytes"), bytes)
        stream = await sb.exec_stream(["x"])
        async for chunk in stream:
            assert_type(chunk, Tuple[str, bytes])
        assert_type(stream.result, Optional[libdsec.ExecResult])
        assert_type(sb.network, Optional[libdsec.NetworkInfo])
        assert_type(await sb.set_network(allow=["pypi.org:443"]), libdsec.AsyncSandbox)
        assert_type(await sb.kill(), bool)
    async with libdsec.AsyncClient(url="http://127.0.0.1:1", token="t") as client:
        assert_type(await client.list(), List[libdsec.AsyncSandbox])

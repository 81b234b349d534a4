# SPDX-License-Identifier: Apache-2.0
"""libdsec: the Python client of the dsec-vmm node daemon (standard library only).

    import libdsec
    with libdsec.Sandbox.create(tier="container", layers=["base:bookworm"]) as sb:
        r = sb.commands.run("uname -a", on_stdout=print)
        print(r.exit_code, r.stdout)
        sb.files.write("/work/a.txt", "hello")
        print(sb.files.read("/work/a.txt"), [e.path for e in sb.files.list("/work")])

    async with await libdsec.AsyncSandbox.create(tier="fncall") as sb:
        print((await sb.commands.run("print(2 + 2)")).stdout)

    with libdsec.Sandbox.create(allow=["pypi.org:443"]) as sb:   # a network, egress policy
        print(sb.network.address, sb.network.counters)
        sb.set_network(allow=["pypi.org:443", "*.debian.org"])    # replaces the policy

Sandbox.create/connect, sb.commands, sb.files and sb.kill() follow E2B's
Python SDK; AsyncSandbox is the same on asyncio. The earlier API stays:
Sandbox(...) creating on construction, sb.exec / sb.exec_stream (bytes),
Task (trajectory resume), and Client, the lower-level API (one method per
daemon endpoint, returning SandboxHandle objects).
"""

from ._version import __version__
from .aio import AsyncClient, AsyncCommands, AsyncDirWatch, AsyncExecStream, AsyncFiles, AsyncSandbox
from .api import Sandbox, Task
from .client import Client
from .commands import Commands, OutputHandler
from .errors import (Conflict, DeadlineExceeded, DsecError, ExecFailed, InternalError,
                     InvalidArgument, NotFound, ProtocolError, ResourceExhausted,
                     TransportError, Unauthenticated, Unavailable)
from .files import Files
from .results import (CommandResult, Divergence, ExecResult, FileEntry, FileEvent, Forked,
                      NetworkCounters, NetworkInfo)
from .sandbox import DirWatch, ExecStream, SandboxHandle
from ._transport import DEFAULT_SOCKET, UnixHTTPConnection

__all__ = [
    "__version__",
    # E2B's idiom, blocking and asyncio
    "Sandbox", "Commands", "Files", "CommandResult", "OutputHandler", "DirWatch", "FileEvent",
    "AsyncSandbox", "AsyncCommands", "AsyncFiles", "AsyncClient", "AsyncExecStream", "AsyncDirWatch",
    # the earlier API and the lower-level one
    "Task", "Client", "SandboxHandle", "ExecResult", "ExecStream", "Divergence", "FileEntry", "Forked",
    # sandbox networking (sb.network)
    "NetworkInfo", "NetworkCounters",
    # errors
    "DsecError", "InvalidArgument", "NotFound", "Conflict", "ResourceExhausted", "Unavailable",
    "Unauthenticated", "DeadlineExceeded", "InternalError", "ProtocolError", "ExecFailed",
    "TransportError",
    "DEFAULT_SOCKET", "UnixHTTPConnection",
]

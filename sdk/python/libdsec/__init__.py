# SPDX-License-Identifier: Apache-2.0
"""libdsec: the Python client of the dsec-vmm node daemon (standard library only).

    import libdsec
    with libdsec.Sandbox(tier="container", layers=["base:bookworm"], qos="ls") as sb:
        r = sb.exec(["sh", "-c", "uname -a"])
        print(r.exit_code, r.duration_s, r.stdout)
    with libdsec.Sandbox(tier="fncall") as sb:       # code strings, python by default
        print(sb.exec("print(2 + 2)").stdout)

Sandbox and Task are the trainer-facing API; Client is the lower-level one
(one method per daemon endpoint, returning SandboxHandle objects).
"""

from .api import Files, Sandbox, Task
from .client import Client
from .errors import (Conflict, DeadlineExceeded, DsecError, ExecFailed, InternalError,
                     InvalidArgument, NotFound, ProtocolError, ResourceExhausted,
                     TransportError, Unauthenticated, Unavailable)
from .results import Divergence, ExecResult, FileEntry
from .sandbox import ExecStream, SandboxHandle
from ._transport import DEFAULT_SOCKET, UnixHTTPConnection

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "Task", "Files", "Client", "SandboxHandle", "ExecResult", "ExecStream",
    "Divergence", "FileEntry", "DsecError", "InvalidArgument", "NotFound", "Conflict",
    "ResourceExhausted", "Unavailable", "Unauthenticated", "DeadlineExceeded", "InternalError",
    "ProtocolError", "ExecFailed", "TransportError", "DEFAULT_SOCKET", "UnixHTTPConnection",
]

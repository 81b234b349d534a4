# SPDX-License-Identifier: Apache-2.0
"""The daemon client (blocking): one method per endpoint."""

from __future__ import annotations

from typing import Any, List, Literal, Optional, Sequence

from . import _protocol as P
from ._protocol import JSONObject, NetworkSpec
from ._transport import Transport
from .sandbox import SandboxHandle


def _sandbox_body(tier: str, layers: Optional[Sequence[str]], lang: Optional[str],
                  cpus: Optional[float], memory_mib: Optional[int], pids: Optional[int],
                  qos: Optional[str], ttl_s: Optional[int],
                  user_namespace: Optional[bool] = None) -> JSONObject:
    """Compatibility name of _protocol.sandbox_body."""
    return P.sandbox_body(tier, layers, lang, cpus, memory_mib, pids, qos, ttl_s, user_namespace)


class Client:
    """A client of one dsec-vmm node daemon.

    Client(socket_path=...) talks HTTP over the daemon's unix socket (default:
    $DSEC_SOCKET, else /run/dsec-vmm/api.sock); Client(url="http://host:port",
    token=...) over TCP with a bearer token. timeout is the socket timeout in
    seconds for each request; an exec waits timeout + its timeout_s.

    One Client may be shared by any number of threads: each thread gets its
    own keep-alive connection.
    """

    def __init__(self, socket_path: Optional[str] = None, url: Optional[str] = None,
                 token: Optional[str] = None, timeout: Optional[float] = 60.0) -> None:
        self._transport = Transport(socket_path=socket_path, url=url, token=token,
                                    timeout=timeout)

    @property
    def endpoint(self) -> str:
        return self._transport.endpoint

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return "Client(%s)" % self.endpoint

    # -- node ---------------------------------------------------------------

    def health(self) -> JSONObject:
        """Returns {"status", "version", "tiers": {tier: bool}, "sandboxes": N}."""
        return P.json_object(self._transport.send_json(P.health()), "health")

    def metrics(self) -> str:
        """Returns the Prometheus text exposition."""
        return P.parse_metrics(self._transport.send(P.metrics()))

    # -- sandboxes ------------------------------------------------------------

    def create(self, tier: Optional[str] = None, layers: Optional[Sequence[str]] = None,
               lang: Optional[str] = None, cpus: Optional[float] = None,
               memory_mib: Optional[int] = None, pids: Optional[int] = None,
               qos: Optional[str] = None, ttl_s: Optional[int] = None,
               task_id: Optional[str] = None,
               user_namespace: Optional[bool] = None, *,
               network: Optional[NetworkSpec] = None, allow: Optional[Sequence[str]] = None,
               deny: Optional[Sequence[str]] = None,
               snapshot: Optional[str] = None) -> SandboxHandle:
        """Creates a sandbox. Only the arguments given are sent; the daemon
        applies its defaults to the rest. With task_id every exec is recorded
        in that task's trajectory log. user_namespace=True (container tier):
        root inside is an unprivileged host id range of the sandbox's own.

        network= gives the sandbox a network with an egress policy, as the
        API writes it ({"egress": {"allow": [...], "deny": [...]}}; {}: a
        network where nothing outside is allowed); allow=/deny= are
        shorthand for it (TypeError with network=). Without either the
        sandbox has no network. tier: "container" unless given.

        snapshot= makes the sandbox from a snapshot (SandboxHandle.snapshot):
        its files and settings; only ttl_s and task_id may be given too."""
        body = P.create_body(tier, snapshot, layers, lang, cpus, memory_mib, pids, qos, ttl_s,
                             user_namespace, task_id, P.network_body(network, allow, deny))
        return SandboxHandle(self, self._transport.send_json(P.create_sandbox(body)))

    def snapshots(self) -> List[JSONObject]:
        """The node's snapshots, oldest first: [{"id", "source", "tier",
        "layer", "created_unix_ms", ...}]."""
        return P.parse_snapshot_list(self._transport.send_json(P.list_snapshots()))

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Removes a snapshot (sandboxes made from it run on)."""
        self._transport.send(P.delete_snapshot(snapshot_id))

    def get(self, sandbox_id: str) -> SandboxHandle:
        return SandboxHandle(self, self._transport.send_json(P.get_sandbox(sandbox_id)))

    def list(self) -> List[SandboxHandle]:
        obj = self._transport.send_json(P.list_sandboxes())
        return [SandboxHandle(self, s) for s in P.parse_sandbox_list(obj)]

    def delete(self, sandbox_id: str) -> None:
        self._transport.send(P.delete_sandbox(sandbox_id))

    # -- layers -----------------------------------------------------------------

    def layers(self) -> List[JSONObject]:
        """Returns the node's layers: [{"name", "version", "digest", "parents", ...}]."""
        return P.parse_layer_list(self._transport.send_json(P.layers()))

    def build_layer(self, name: str, version: str, path: str,
                    parent: Optional[str] = None) -> Any:
        """Builds layer name:version from a directory on the daemon's host."""
        return self._transport.send_json(P.build_layer(name, version, path, parent))

    def remove_layer(self, ref: str) -> None:
        """Removes layer "name:version" (Conflict while a sandbox uses it)."""
        self._transport.send(P.remove_layer(ref))

    # -- trajectory -------------------------------------------------------------

    def resume(self, task_id: str, tier: str = "container",
               layers: Optional[Sequence[str]] = None, lang: Optional[str] = None,
               cpus: Optional[float] = None, memory_mib: Optional[int] = None,
               pids: Optional[int] = None, qos: Optional[str] = None,
               ttl_s: Optional[int] = None, *, network: Optional[NetworkSpec] = None,
               allow: Optional[Sequence[str]] = None,
               deny: Optional[Sequence[str]] = None) -> SandboxHandle:
        """Resumes a preempted task in a fresh sandbox.

        Send the task's commands again in order: those matching the recording
        return the recorded result (result.replayed) without running; the
        first that differs or is new runs live (result.divergence says where)
        and everything after is live and recorded. The returned Sandbox's
        .recorded is the number of recorded execs. network/allow/deny as
        for create.
        """
        body = P.sandbox_body(tier, layers, lang, cpus, memory_mib, pids, qos, ttl_s,
                              network=P.network_body(network, allow, deny))
        return SandboxHandle(self, self._transport.send_json(P.resume_task(task_id, body)))

    def task_log(self, task_id: str) -> JSONObject:
        """Returns {"records": [...], "checkpoints": [...]} (outputs as *_b64)."""
        return P.json_object(self._transport.send_json(P.task_log(task_id)), "task log")

    def delete_task(self, task_id: str) -> None:
        self._transport.send(P.delete_task(task_id))

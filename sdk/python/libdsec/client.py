# SPDX-License-Identifier: Apache-2.0
"""The daemon client."""

from . import errors
from ._transport import Transport, quote_segment
from .sandbox import SandboxHandle


def _sandbox_body(tier, layers, lang, cpus, memory_mib, pids, qos, ttl_s, user_namespace=None):
    if not isinstance(tier, str) or not tier:
        raise errors.InvalidArgument("tier must be a string such as 'container' or 'fncall'",
                                     field="tier")
    if isinstance(layers, str):
        raise errors.InvalidArgument("layers must be a list of refs, e.g. ['base:bookworm']",
                                     field="layers")
    body = {"tier": tier}
    for key, value in (("layers", None if layers is None else list(layers)), ("lang", lang),
                       ("cpus", cpus), ("memory_mib", memory_mib), ("pids", pids),
                       ("qos", qos), ("ttl_s", ttl_s), ("user_namespace", user_namespace)):
        if value is not None:
            body[key] = value
    return body


class Client:
    """A client of one dsec-vmm node daemon.

    Client(socket_path=...) talks HTTP over the daemon's unix socket (default:
    $DSEC_SOCKET, else /run/dsec-vmm/api.sock); Client(url="http://host:port",
    token=...) over TCP with a bearer token. timeout is the socket timeout in
    seconds for each request; an exec waits timeout + its timeout_s.

    One Client may be shared by any number of threads: each thread gets its
    own keep-alive connection.
    """

    def __init__(self, socket_path=None, url=None, token=None, timeout=60.0):
        self._transport = Transport(socket_path=socket_path, url=url, token=token,
                                    timeout=timeout)

    @property
    def endpoint(self):
        return self._transport.endpoint

    def close(self):
        self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "Client(%s)" % self.endpoint

    # -- node ---------------------------------------------------------------

    def health(self):
        """Returns {"status", "version", "tiers": {tier: bool}, "sandboxes": N}."""
        return self._transport.request_json("GET", "/v1/health")

    def metrics(self):
        """Returns the Prometheus text exposition."""
        resp = self._transport.request("GET", "/metrics", accept="text/plain")
        return resp.body.decode("utf-8", "replace")

    # -- sandboxes ------------------------------------------------------------

    def create(self, tier="container", layers=None, lang=None, cpus=None, memory_mib=None,
               pids=None, qos=None, ttl_s=None, task_id=None, user_namespace=None):
        """Creates a sandbox. Only the arguments given are sent; the daemon
        applies its defaults to the rest. With task_id every exec is recorded
        in that task's trajectory log. user_namespace=True (container tier):
        root inside is an unprivileged host id range of the sandbox's own."""
        body = _sandbox_body(tier, layers, lang, cpus, memory_mib, pids, qos, ttl_s, user_namespace)
        if task_id is not None:
            body["task_id"] = task_id
        return SandboxHandle(self, self._transport.request_json("POST", "/v1/sandboxes", body,
                                                          expect=(201, 200)))

    def get(self, sandbox_id):
        return SandboxHandle(self, self._transport.request_json(
            "GET", "/v1/sandboxes/" + quote_segment(sandbox_id)))

    def list(self):
        obj = self._transport.request_json("GET", "/v1/sandboxes")
        return [SandboxHandle(self, s) for s in obj.get("sandboxes", [])]

    def delete(self, sandbox_id):
        self._transport.request("DELETE", "/v1/sandboxes/" + quote_segment(sandbox_id))

    # -- layers -----------------------------------------------------------------

    def layers(self):
        """Returns the node's layers: [{"name", "version", "digest", "parents", ...}]."""
        return self._transport.request_json("GET", "/v1/layers").get("layers", [])

    def build_layer(self, name, version, path, parent=None):
        """Builds layer name:version from a directory on the daemon's host."""
        body = {"name": name, "version": version, "path": path}
        if parent is not None:
            body["parent"] = parent
        return self._transport.request_json("POST", "/v1/layers", body, timeout=max(
            self._transport.timeout or 0, 600.0))

    def remove_layer(self, ref):
        """Removes layer "name:version" (Conflict while a sandbox uses it)."""
        self._transport.request("DELETE", "/v1/layers/" + quote_segment(ref))

    # -- trajectory -------------------------------------------------------------

    def resume(self, task_id, tier="container", layers=None, lang=None, cpus=None,
               memory_mib=None, pids=None, qos=None, ttl_s=None):
        """Resumes a preempted task in a fresh sandbox.

        Send the task's commands again in order: those matching the recording
        return the recorded result (result.replayed) without running; the
        first that differs or is new runs live (result.divergence says where)
        and everything after is live and recorded. The returned Sandbox's
        .recorded is the number of recorded execs.
        """
        body = _sandbox_body(tier, layers, lang, cpus, memory_mib, pids, qos, ttl_s)
        return SandboxHandle(self, self._transport.request_json(
            "POST", "/v1/tasks/%s/resume" % quote_segment(task_id), body, expect=(201, 200)))

    def task_log(self, task_id):
        """Returns {"records": [...], "checkpoints": [...]} (outputs as *_b64)."""
        return self._transport.request_json("GET", "/v1/tasks/%s/log" % quote_segment(task_id))

    def delete_task(self, task_id):
        self._transport.request("DELETE", "/v1/tasks/" + quote_segment(task_id))

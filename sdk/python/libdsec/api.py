# SPDX-License-Identifier: Apache-2.0
"""The trainer-facing API: Sandbox(...) creates a sandbox, Task(...) resumes one.

    with libdsec.Sandbox(tier="container", layers=["base:bookworm"], qos="ls") as sb:
        r = sb.exec(["make", "test"])
        print(r.exit_code, r.duration_s, r.stdout)

Both sit on Client (the lower-level API, one method per endpoint). The
daemon is found through socket=, else url= (TCP, with token=), else
$DSEC_SOCKET, else the daemon's default socket (libdsec.DEFAULT_SOCKET).
"""

import secrets

from .client import Client
from . import errors


def _client(client, socket, url, token, timeout):
    """Returns (client, owned): a given client is shared, else one is made."""
    if client is not None:
        if socket is not None or url is not None or token is not None:
            raise ValueError("give client= or socket=/url=/token=, not both")
        return client, False
    return Client(socket_path=socket, url=url, token=token, timeout=timeout), True


class Files:
    """sb.files: read, write and list files in the sandbox (container tier)."""

    def __init__(self, handle):
        self._h = handle

    def read(self, path):
        """Returns the file's bytes (NotFound if it does not exist)."""
        return self._h.read_file(path)

    def read_text(self, path, encoding="utf-8"):
        return self._h.read_file(path).decode(encoding)

    def write(self, path, data, mode=0o644):
        """Writes bytes (or str as UTF-8), creating parent directories."""
        self._h.write_file(path, data, mode=mode)

    def list(self, path):
        """Returns the directory's entries as FileEntry values."""
        return self._h.list_files(path)


class Sandbox:
    """One sandbox, created when constructed and deleted by close() or at the
    end of a `with` block. The tier is one parameter: "container" runs argv
    lists, "fncall" runs code strings (lang="python" by default, or "bash").

    Arguments left None are not sent; the daemon applies its defaults (e.g.
    the default layers of the tier). task_id records every exec in that
    task's trajectory log (see Task for resuming it). user_namespace=True
    (container tier) runs it in a user namespace: root inside is an
    unprivileged host id range of its own.
    """

    def __init__(self, tier="container", layers=None, qos=None, socket=None, *, lang=None,
                 cpus=None, memory_mib=None, pids=None, ttl_s=None, task_id=None, url=None,
                 token=None, client=None, timeout=60.0, user_namespace=None, _handle=None):
        self._client, self._owns_client = _client(client, socket, url, token, timeout)
        self._closed = False
        try:
            if _handle is None:
                _handle = self._client.create(tier=tier, layers=layers, lang=lang, cpus=cpus,
                                              memory_mib=memory_mib, pids=pids, qos=qos,
                                              ttl_s=ttl_s, task_id=task_id,
                                              user_namespace=user_namespace)
        except BaseException:
            if self._owns_client:
                self._client.close()
            raise
        self.handle = _handle
        self.files = Files(_handle)

    @classmethod
    def _adopt(cls, handle, client, owns_client):
        sb = cls.__new__(cls)
        sb._client, sb._owns_client, sb._closed = client, owns_client, False
        sb.handle = handle
        sb.files = Files(handle)
        return sb

    # -- what the sandbox is ------------------------------------------------

    @property
    def client(self):
        return self._client

    @property
    def id(self):
        return self.handle.id

    @property
    def tier(self):
        return self.handle.tier

    @property
    def state(self):
        return self.handle.state

    @property
    def task_id(self):
        return self.handle.task_id

    @property
    def qos_applied(self):
        """True if the daemon placed the sandbox by its qos (sched/ cpuset)."""
        return self.handle.qos_applied

    @property
    def qos_reason(self):
        """Why the qos was not applied (None when it was, or none was asked)."""
        return self.handle.qos_reason

    @property
    def placement(self):
        """{"qos", "cpus", "mems", "mechanism", "cgroup"} when placed, else None."""
        return self.handle.placement

    @property
    def recorded(self):
        """On a resumed sandbox: how many execs the task's log holds (else None)."""
        return self.handle.recorded

    @property
    def info(self):
        return self.handle.info

    def __repr__(self):
        return "Sandbox(id=%r, tier=%r, state=%r)" % (self.id, self.tier, self.state)

    # -- operations -------------------------------------------------------------

    def exec(self, argv_or_code, stdin=None, env=None, cwd=None, timeout_s=None,
             idempotent=False, args=None):
        """Runs a command to completion; returns an ExecResult (.stdout, .stderr,
        .exit_code, .duration_s, ...). container: an argv list; fncall: a code
        string (args= are its arguments)."""
        return self.handle.exec(argv_or_code, stdin=stdin, env=env, cwd=cwd, timeout_s=timeout_s,
                                idempotent=idempotent, args=args)

    def exec_stream(self, argv_or_code, **kw):
        """Like exec, but yields (stream, bytes) as output arrives (ExecStream)."""
        return self.handle.exec_stream(argv_or_code, **kw)

    def pack_diff(self, name=None, version="1"):
        """Captures the sandbox's changes as a new layer; returns {"layer",
        "digest", "size_bytes"}. name defaults to "diff-<sandbox id>-<random>".
        With a task_id, it is also the task's checkpoint for resume."""
        if name is None:
            name = "diff-%s-%s" % (self.id, secrets.token_hex(3))
        return self.handle.pack_diff(name, version)

    def pause(self):
        self.handle.pause()
        return self

    def resume(self):
        self.handle.resume()
        return self

    def refresh(self):
        self.handle.refresh()
        return self

    def close(self):
        """Deletes the sandbox (once; a sandbox already gone is fine)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.handle.delete()
        except errors.NotFound:
            pass
        finally:
            if self._owns_client:
                self._client.close()

    delete = close

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except errors.DsecError:
            if exc_type is None:
                raise
        return False


class Task:
    """A trajectory-log task: Task("job42-ep7").resume(tier=..., layers=...)
    returns a Sandbox in replay mode; .log() the recorded execs."""

    def __init__(self, task_id, socket=None, *, url=None, token=None, client=None, timeout=60.0):
        if not isinstance(task_id, str) or not task_id:
            raise errors.InvalidArgument("task_id must be a non-empty string", field="task_id")
        self.task_id = task_id
        self._client, self._owns_client = _client(client, socket, url, token, timeout)

    @property
    def client(self):
        return self._client

    def sandbox(self, tier="container", layers=None, qos=None, **kw):
        """A new sandbox recording into this task (Conflict if one is live)."""
        return Sandbox(tier=tier, layers=layers, qos=qos, task_id=self.task_id,
                       client=self._client, **kw)

    def resume(self, tier="container", layers=None, qos=None, *, lang=None, cpus=None,
               memory_mib=None, pids=None, ttl_s=None):
        """Resumes the task in a fresh sandbox. Send its commands again in
        order: matching ones return the recorded result without running
        (result.replayed); the first that differs or is new runs live, with
        result.divergence saying where; the rest is live and recorded."""
        h = self._client.resume(self.task_id, tier=tier, layers=layers, lang=lang, cpus=cpus,
                                memory_mib=memory_mib, pids=pids, qos=qos, ttl_s=ttl_s)
        return Sandbox._adopt(h, self._client, False)

    def log(self):
        """Returns {"records": [...], "checkpoints": [...]} (outputs as *_b64)."""
        return self._client.task_log(self.task_id)

    @property
    def records(self):
        return self.log().get("records", [])

    def delete(self):
        self._client.delete_task(self.task_id)

    def close(self):
        if self._owns_client:
            self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "Task(%r)" % self.task_id

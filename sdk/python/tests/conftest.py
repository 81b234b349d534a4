# SPDX-License-Identifier: Apache-2.0
"""pytest fixtures of the integration tests: a private real daemon.

`node` (one per session) is a running dsec-vmmd under a temp dir with a
busybox layer built through the API (`node.base`) and, where the host has
python3.11, the fncall tests' offline python layer (`node.python_layer`, an
EROFS file passed as a layer). Tests needing a daemon of their own (crash,
load) use `private_tmp` and harness.Daemon. Without the prerequisites (see
harness.missing_prerequisite) these fixtures skip with the reason.
"""

import os
import secrets
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402
import libdsec  # noqa: E402


class Node:
    def __init__(self, daemon, base, python_layer, python_error):
        self.daemon = daemon
        self.socket = daemon.socket
        self.base = base
        self.python_layer = python_layer
        self.python_error = python_error
        self.created = set()   # every sandbox id made through track()
        self.tasks = set()
        self.client = daemon.client(timeout=120)

    def track(self, sb):
        self.created.add(sb.id)
        return sb

    def new_task(self, tag="task"):
        t = "sdkpy-%s-%s" % (tag, secrets.token_hex(6))
        self.tasks.add(t)
        return t


def require_daemon():
    reason = harness.missing_prerequisite()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def private_tmp():
    tmp = tempfile.mkdtemp(prefix="dsec-sdkpy-")
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def node():
    require_daemon()
    tmp = tempfile.mkdtemp(prefix="dsec-sdkpy-node-")
    # The fncall tests' runtime layer is an image file outside the layer
    # store: the daemon takes such files only from directories it is given.
    fncall_layers = os.path.join(tmp, "fncall-layers")
    os.makedirs(fncall_layers, mode=0o700)
    d = harness.Daemon(tmp, tcp_token=secrets.token_hex(16),
                       extra_args=["--layer-image-dir", fncall_layers])
    n = None
    try:
        d.start()
        tree = os.path.join(tmp, "busybox-tree")
        harness.build_busybox_tree(tree)
        c = d.client(timeout=300)
        name = "sdkpy-bb-" + secrets.token_hex(4)
        c.build_layer(name, "1", tree)
        c.close()
        python_layer, python_error = None, None
        try:
            python_layer = harness.build_fncall_python_layer(fncall_layers)
        except (RuntimeError, OSError) as e:
            python_error = str(e)
        n = Node(d, name + ":1", python_layer, python_error)
        yield n
    finally:
        if n is not None:
            for sid in n.created:
                try:
                    n.client.delete(sid)
                except libdsec.DsecError:
                    pass
            for t in n.tasks:
                try:
                    n.client.delete_task(t)
                except libdsec.DsecError:
                    pass
            n.client.close()
        d.stop()
        leaks = harness.host_leaks(tmp, n.created if n else ())
        if "mounts" not in leaks:  # never delete through a leaked mount
            shutil.rmtree(tmp, ignore_errors=True)
        if leaks:
            raise AssertionError("the node daemon left %r" % leaks)

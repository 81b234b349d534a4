# SPDX-License-Identifier: Apache-2.0
"""Unit tests: the requests the client sends and how it maps answers and errors."""

import os
import threading
import unittest

from fake_daemon import FakeDaemon, sandbox_obj

import libdsec


class ClientTestBase(unittest.TestCase):
    tcp = False
    token = None

    def setUp(self):
        self.fake = FakeDaemon(tcp=self.tcp)
        self.addCleanup(self.fake.close)
        if self.tcp:
            self.client = libdsec.Client(url=self.fake.url, token=self.token)
        else:
            self.client = libdsec.Client(socket_path=self.fake.socket_path, token=self.token)
        self.addCleanup(self.client.close)

    def assertRequest(self, method, path, json_body=None, query=None):
        req = self.fake.last()
        self.assertEqual(req.method, method)
        self.assertEqual(req.path, path)
        if query is not None:
            self.assertEqual(req.query, query)
        if json_body is not None:
            self.assertEqual(req.headers.get("content-type"), "application/json")
            self.assertEqual(req.json, json_body)
        return req


class CreateAndLookupTest(ClientTestBase):
    def test_create_sends_only_the_fields_given(self):
        self.fake.reply(201, sandbox_obj("sb-a1"))
        sb = self.client.create(tier="container")
        self.assertRequest("POST", "/v1/sandboxes", {"tier": "container"})
        self.assertEqual((sb.id, sb.tier, sb.state), ("sb-a1", "container", "running"))
        self.assertEqual(sb.memory_mib, 512)
        self.assertIsNone(sb.recorded)

    def test_create_sends_every_field(self):
        self.fake.reply(201, sandbox_obj("sb-a2", tier="fncall", qos="ls", task_id="t-1",
                                         qos_applied=True,
                                         placement={"qos": "ls", "cpus": [0], "mems": [0],
                                                    "mechanism": "cpuset"}))
        sb = self.client.create(tier="fncall", layers=("base:bookworm", "py:3"), lang="bash",
                                cpus=0.5, memory_mib=256, pids=64, qos="ls", ttl_s=30,
                                task_id="t-1")
        self.assertRequest("POST", "/v1/sandboxes", {
            "tier": "fncall", "layers": ["base:bookworm", "py:3"], "lang": "bash",
            "cpus": 0.5, "memory_mib": 256, "pids": 64, "qos": "ls", "ttl_s": 30,
            "task_id": "t-1"})
        self.assertEqual((sb.tier, sb.qos, sb.task_id), ("fncall", "ls", "t-1"))
        self.assertEqual((sb.qos_applied, sb.qos_reason, sb.placement["cpus"]), (True, None, [0]))

    def test_create_sends_user_namespace_when_asked(self):
        self.fake.reply(201, sandbox_obj("sb-a3"))
        self.client.create(tier="container", user_namespace=True)
        self.assertRequest("POST", "/v1/sandboxes", {"tier": "container", "user_namespace": True})

    def test_create_defaults_to_the_container_tier(self):
        self.fake.reply(201, sandbox_obj("sb-a4"))
        self.client.create()
        self.assertRequest("POST", "/v1/sandboxes", {"tier": "container"})

    def test_create_from_a_snapshot_sends_it_with_ttl_and_task_only(self):
        self.fake.reply(201, sandbox_obj("sb-a5"))
        self.client.create(snapshot="snap-0123456789abcdef", ttl_s=60, task_id="t-2")
        self.assertRequest("POST", "/v1/sandboxes", {"snapshot": "snap-0123456789abcdef",
                                                     "ttl_s": 60, "task_id": "t-2"})
        for kw in ({"tier": "container"}, {"layers": ["base:bookworm"]}, {"memory_mib": 64},
                   {"allow": ["10.0.0.0/8"]}):
            with self.assertRaises(TypeError):
                self.client.create(snapshot="snap-0123456789abcdef", **kw)
        with self.assertRaises(TypeError):
            self.client.create(snapshot="")

    def test_create_rejects_a_string_for_layers_without_a_request(self):
        with self.assertRaises(libdsec.InvalidArgument) as cm:
            self.client.create(tier="container", layers="base:bookworm")
        self.assertEqual(cm.exception.field, "layers")
        self.assertEqual(self.fake.requests, [])

    def test_get_list_delete(self):
        self.fake.reply(200, sandbox_obj("sb-x", state="paused"))
        sb = self.client.get("sb-x")
        self.assertRequest("GET", "/v1/sandboxes/sb-x")
        self.assertEqual(sb.state, "paused")
        self.fake.reply(200, {"sandboxes": [sandbox_obj("sb-1"), sandbox_obj("sb-2", tier="fncall")]})
        sbs = self.client.list()
        self.assertRequest("GET", "/v1/sandboxes")
        self.assertEqual([(s.id, s.tier) for s in sbs], [("sb-1", "container"), ("sb-2", "fncall")])
        self.fake.reply(204)
        self.client.delete("sb-x")
        self.assertRequest("DELETE", "/v1/sandboxes/sb-x")

    def test_ids_are_percent_encoded_in_paths(self):
        self.fake.reply(200, sandbox_obj("a/b c"))
        self.client.get("a/b c")
        self.assertEqual(self.fake.last().raw_path, "/v1/sandboxes/a%2Fb%20c")

    def test_health_and_metrics(self):
        health = {"status": "ok", "version": "0.1.0", "sandboxes": 3,
                  "tiers": {"container": True, "fncall": True, "microvm": False, "fullvm": False}}
        self.fake.reply(200, health)
        self.assertEqual(self.client.health(), health)
        self.assertRequest("GET", "/v1/health")
        text = "# TYPE dsec_sandboxes gauge\ndsec_sandboxes{tier=\"container\"} 3\n"
        self.fake.reply(200, body=text.encode(), content_type="text/plain; version=0.0.4")
        self.assertEqual(self.client.metrics(), text)
        self.assertRequest("GET", "/metrics")


class LayerAndTaskTest(ClientTestBase):
    def test_layers(self):
        layer = {"name": "ws", "version": "1", "digest": "sha256:ab", "parents": [],
                 "size_bytes": 4096, "created": "2026-01-01T00:00:00Z"}
        self.fake.reply(200, {"layers": [layer]})
        self.assertEqual(self.client.layers(), [layer])
        self.assertRequest("GET", "/v1/layers")

    def test_build_layer_with_and_without_parent(self):
        self.fake.reply(201, {"name": "ws", "version": "1"})
        self.client.build_layer("ws", "1", "/srv/ws")
        self.assertRequest("POST", "/v1/layers", {"name": "ws", "version": "1", "path": "/srv/ws"})
        self.fake.reply(201, {"name": "ws", "version": "2"})
        out = self.client.build_layer("ws", "2", "/srv/ws2", parent="ws:1")
        self.assertRequest("POST", "/v1/layers",
                           {"name": "ws", "version": "2", "path": "/srv/ws2", "parent": "ws:1"})
        self.assertEqual(out["version"], "2")

    def test_remove_layer_keeps_the_colon(self):
        self.fake.reply(204)
        self.client.remove_layer("ws:1")
        req = self.assertRequest("DELETE", "/v1/layers/ws:1")
        self.assertEqual(req.raw_path, "/v1/layers/ws:1")

    def test_resume_sends_the_create_body_without_task_id(self):
        self.fake.reply(201, sandbox_obj("sb-r", task_id="task.7", recorded=4))
        sb = self.client.resume("task.7", tier="container", layers=["base:bookworm"], memory_mib=128)
        self.assertRequest("POST", "/v1/tasks/task.7/resume",
                           {"tier": "container", "layers": ["base:bookworm"], "memory_mib": 128})
        self.assertEqual((sb.id, sb.recorded, sb.task_id), ("sb-r", 4, "task.7"))

    def test_task_log_and_delete(self):
        log = {"records": [{"seq": 0, "argv": ["true"], "cwd": "/", "exit_code": 0, "signal": None,
                            "duration_ms": 1.0, "stdout_b64": "", "stderr_b64": ""}],
               "checkpoints": [{"prefix": 1, "layer": "ck:1"}]}
        self.fake.reply(200, log)
        self.assertEqual(self.client.task_log("t-9"), log)
        self.assertRequest("GET", "/v1/tasks/t-9/log")
        self.fake.reply(204)
        self.client.delete_task("t-9")
        self.assertRequest("DELETE", "/v1/tasks/t-9")


class ErrorMappingTest(ClientTestBase):
    CASES = [
        (400, "INVALID_ARGUMENT", libdsec.InvalidArgument),
        (401, "UNAUTHENTICATED", libdsec.Unauthenticated),
        (404, "NOT_FOUND", libdsec.NotFound),
        (409, "FAILED_PRECONDITION", libdsec.Conflict),
        (409, "ALREADY_EXISTS", libdsec.Conflict),
        (413, "RESOURCE_EXHAUSTED", libdsec.ResourceExhausted),
        (429, "RESOURCE_EXHAUSTED", libdsec.ResourceExhausted),
        (503, "UNAVAILABLE", libdsec.Unavailable),
        (500, "INTERNAL", libdsec.InternalError),
        (504, "DEADLINE_EXCEEDED", libdsec.DeadlineExceeded),
    ]

    def test_codes_map_to_exceptions_with_code_message_field_status(self):
        for status, code, cls in self.CASES:
            with self.subTest(code=code, status=status):
                self.fake.error(status, code, message="bad %s" % code, field="memory_mib")
                with self.assertRaises(cls) as cm:
                    self.client.create(tier="container", memory_mib=-1)
                e = cm.exception
                self.assertIsInstance(e, libdsec.DsecError)
                self.assertEqual((e.code, e.message, e.field, e.status),
                                 (code, "bad %s" % code, "memory_mib", status))
                self.assertIn(code, str(e))
                self.assertIn("memory_mib", str(e))

    def test_field_is_none_when_absent(self):
        self.fake.error(404, "NOT_FOUND", message="no sandbox sb-z")
        with self.assertRaises(libdsec.NotFound) as cm:
            self.client.get("sb-z")
        self.assertIsNone(cm.exception.field)

    def test_status_decides_when_the_body_is_not_json(self):
        for status, cls in ((404, libdsec.NotFound), (409, libdsec.Conflict),
                            (429, libdsec.ResourceExhausted), (503, libdsec.Unavailable),
                            (502, libdsec.InternalError), (418, libdsec.DsecError)):
            with self.subTest(status=status):
                self.fake.reply(status, body=b"plain words", content_type="text/plain")
                with self.assertRaises(cls) as cm:
                    self.client.health()
                self.assertIsNone(cm.exception.code)
                self.assertEqual(cm.exception.status, status)
                self.assertEqual(cm.exception.message, "plain words")

    def test_non_json_success_is_a_protocol_error(self):
        self.fake.reply(200, body=b"<html>", content_type="text/html")
        with self.assertRaises(libdsec.ProtocolError):
            self.client.health()


class TransportTest(ClientTestBase):
    def test_missing_socket_names_the_path(self):
        path = os.path.join(self.fake.tmpdir, "nothing-here.sock")
        client = libdsec.Client(socket_path=path)
        with self.assertRaises(ConnectionError) as cm:
            client.health()
        self.assertIsInstance(cm.exception, libdsec.TransportError)
        self.assertIsInstance(cm.exception, libdsec.DsecError)
        self.assertIn(path, str(cm.exception))
        self.assertIn("/v1/health", str(cm.exception))

    def test_refused_tcp_names_the_url(self):
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        client = libdsec.Client(url="http://127.0.0.1:%d" % port)
        with self.assertRaises(libdsec.TransportError) as cm:
            client.health()
        self.assertIn("http://127.0.0.1:%d" % port, str(cm.exception))

    def test_socket_path_comes_from_the_environment(self):
        old = os.environ.get("DSEC_SOCKET")
        os.environ["DSEC_SOCKET"] = self.fake.socket_path
        try:
            client = libdsec.Client()
        finally:
            if old is None:
                del os.environ["DSEC_SOCKET"]
            else:
                os.environ["DSEC_SOCKET"] = old
        self.addCleanup(client.close)
        self.fake.reply(200, {"status": "ok"})
        self.assertEqual(client.health()["status"], "ok")
        self.assertEqual(libdsec.Client(socket_path="/x.sock").endpoint, "unix:/x.sock")

    def test_bad_url_is_refused(self):
        for url in ("https://h:1", "h:1", "http://h:1/v1"):
            with self.subTest(url=url), self.assertRaises(ValueError):
                libdsec.Client(url=url)

    def test_one_connection_is_reused_by_a_thread(self):
        for _ in range(5):
            self.fake.reply(200, {"status": "ok"})
            self.client.health()
        self.assertEqual({r.connection for r in self.fake.requests}, {1})
        self.assertEqual(self.fake.connections, 1)

    def test_each_thread_gets_its_own_connection(self):
        n = 4
        for _ in range(n * 3):
            self.fake.reply(200, {"status": "ok"})
        barrier = threading.Barrier(n)
        errors = []

        def work():
            try:
                barrier.wait(10)
                for _ in range(3):
                    self.client.health()
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(len(self.fake.requests), n * 3)
        self.assertEqual(self.fake.connections, n)

    def test_a_connection_from_before_fork_is_not_reused(self):
        self.fake.reply(200, {"status": "ok"})
        self.client.health()
        self.client._transport._local.pid = -1  # as seen by a forked child
        self.fake.reply(200, {"status": "ok"})
        self.client.health()
        self.assertEqual([r.connection for r in self.fake.requests], [1, 2])

    def test_a_connection_the_daemon_dropped_is_replaced_once(self):
        self.fake.reply(200, {"status": "ok"}, drop_after=True)
        self.fake.reply(200, {"status": "ok", "sandboxes": 2})
        self.client.health()
        self.assertEqual(self.client.health()["sandboxes"], 2)
        self.assertEqual(len(self.fake.requests), 2)  # sent once, not twice
        self.assertEqual([r.connection for r in self.fake.requests], [1, 2])


class TokenOverTcpTest(ClientTestBase):
    tcp = True
    token = "s3cret-token"

    def test_every_request_carries_the_bearer_token(self):
        self.fake.reply(200, {"status": "ok"})
        self.client.health()
        self.fake.reply(201, sandbox_obj())
        self.client.create(tier="container")
        for req in self.fake.requests:
            self.assertEqual(req.headers.get("authorization"), "Bearer s3cret-token")

    def test_unauthenticated(self):
        self.fake.error(401, "UNAUTHENTICATED", "missing or bad bearer token")
        with self.assertRaises(libdsec.Unauthenticated) as cm:
            self.client.list()
        self.assertEqual(cm.exception.status, 401)


class NoTokenTest(ClientTestBase):
    tcp = True

    def test_no_authorization_header_without_a_token(self):
        self.fake.reply(200, {"status": "ok"})
        self.client.health()
        self.assertNotIn("authorization", self.fake.last().headers)


if __name__ == "__main__":
    unittest.main()


class WatchDecoderTest(unittest.TestCase):
    """The watch stream's lines (docs/api.yaml, files/watch), decoded."""

    def test_events_keepalives_and_the_end(self):
        from libdsec import _protocol as P
        d = P.WatchDecoder("GET /w")
        self.assertIsNone(d.feed(b'{"watching": {"path": "/w", "recursive": true}}\n'))
        self.assertEqual(d.watching, {"path": "/w", "recursive": True})
        self.assertIsNone(d.feed(b"{}\n"))
        self.assertIsNone(d.feed(b"\n"))
        self.assertIsNone(d.feed(b'{"later": 1}\n'))
        self.assertEqual(d.feed(b'{"event": {"name": "a/b", "type": "create"}}'),
                         libdsec.FileEvent("a/b", "create"))
        with self.assertRaises(libdsec.NotFound):
            d.feed(b'{"error": {"code": "NOT_FOUND", "message": "the watched directory /w was removed"}}')
        with self.assertRaises(libdsec.Unavailable):
            d.feed(b'{"error": {"code": "UNAVAILABLE", "message": "closed"}}')
        for bad in (b'{"event": {"name": 3, "type": "create"}}', b'{"event": []}', b"[1]", b"{nope"):
            with self.assertRaises(libdsec.ProtocolError):
                d.feed(bad)

    def test_the_request(self):
        from libdsec import _protocol as P
        c = P.watch_dir("sb-1", "/work dir", recursive=True)
        self.assertEqual((c.method, c.target), ("GET", "/v1/sandboxes/sb-1/files/watch?path=/work%20dir&recursive=true"))
        self.assertEqual(c.timeout(5.0), P.WATCH_READ_TIMEOUT_S)
        with self.assertRaises(libdsec.InvalidArgument):
            P.watch_dir("sb-1", "/w", recursive=1)

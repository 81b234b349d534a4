# SPDX-License-Identifier: Apache-2.0
"""Unit tests: exec (plain and streamed), files and lifecycle of a Sandbox."""

import base64
import json
import threading
import unittest

from fake_daemon import FakeDaemon, exec_obj, sandbox_obj

import libdsec

ALL_BYTES = bytes(range(256))


def b64(data):
    return base64.b64encode(data).decode("ascii")


def line(obj):
    return json.dumps(obj).encode("utf-8") + b"\n"


class SandboxTestBase(unittest.TestCase):
    tier = "container"

    def setUp(self):
        self.fake = FakeDaemon()
        self.addCleanup(self.fake.close)
        self.client = libdsec.Client(socket_path=self.fake.socket_path)
        self.addCleanup(self.client.close)
        self.fake.reply(201, sandbox_obj("sb-t1", tier=self.tier))
        self.sb = self.client.create(tier=self.tier)

    def assertRequest(self, method, path, json_body=None):
        req = self.fake.last()
        self.assertEqual((req.method, req.path), (method, path))
        if json_body is not None:
            self.assertEqual(req.json, json_body)
        return req


class ExecTest(SandboxTestBase):
    def test_argv_exec_sends_only_argv_by_default(self):
        self.fake.reply(200, exec_obj(stdout="hi\n", stdout_b64=b64(b"hi\n"), seq=3))
        r = self.sb.exec(["sh", "-c", "echo hi"])
        self.assertRequest("POST", "/v1/sandboxes/sb-t1/exec", {"argv": ["sh", "-c", "echo hi"]})
        self.assertEqual((r.exit_code, r.stdout, r.text, r.seq), (0, b"hi\n", "hi\n", 3))
        self.assertTrue(r.ok)
        self.assertIs(r.check(), r)

    def test_every_exec_option_is_sent(self):
        self.fake.reply(200, exec_obj())
        self.sb.exec(["cat"], stdin="text in", env={"A": "1", "B": 2}, cwd="/tmp", timeout_s=7,
                     idempotent=True)
        self.assertRequest("POST", "/v1/sandboxes/sb-t1/exec", {
            "argv": ["cat"], "stdin": "text in", "env": {"A": "1", "B": "2"}, "cwd": "/tmp",
            "timeout_s": 7, "idempotent": True})

    def test_binary_stdin_and_stdout_round_trip(self):
        self.fake.reply(200, exec_obj(stdout="\ufffd", stdout_b64=b64(ALL_BYTES),
                                      stderr_b64=b64(b"\xff\xfe"), stderr="\ufffd\ufffd"))
        r = self.sb.exec(["cat"], stdin=ALL_BYTES)
        body = self.fake.last().json
        self.assertEqual(set(body), {"argv", "stdin_b64"})
        self.assertEqual(base64.b64decode(body["stdin_b64"]), ALL_BYTES)
        self.assertEqual(r.stdout, ALL_BYTES)
        self.assertEqual(r.stderr, b"\xff\xfe")
        self.assertEqual(r.stderr_text, "\ufffd\ufffd")

    def test_a_code_string_on_a_container_is_refused_before_sending(self):
        with self.assertRaises(libdsec.InvalidArgument) as cm:
            self.sb.exec("print(1)")
        self.assertIn("argv", str(cm.exception))
        self.assertEqual(len(self.fake.requests), 1)  # only the create
        with self.assertRaises(TypeError):
            self.sb.exec(42)
        with self.assertRaises(TypeError):
            self.sb.exec(["cat"], stdin=3)

    def test_failure_fields_and_check(self):
        div = {"seq": 2, "reason": "differs", "fields": ["argv"], "not_reapplied": [3, 4]}
        self.fake.reply(200, exec_obj(exit_code=None, signal=9, killed_by="memory",
                                      stderr_b64=b64(b"oom\n"), stdout_dropped=10,
                                      stderr_dropped=20, duration_ms=250.0, seq=2,
                                      replayed=False, divergence=div))
        r = self.sb.exec(["hog"])
        self.assertFalse(r.ok)
        self.assertEqual((r.signal, r.killed_by, r.stdout_dropped, r.stderr_dropped),
                         (9, "memory", 10, 20))
        self.assertEqual(r.duration_s, 0.25)
        self.assertEqual(r.divergence, libdsec.Divergence(2, "differs", ["argv"], [3, 4]))
        with self.assertRaises(libdsec.ExecFailed) as cm:
            r.check()
        self.assertIs(cm.exception.result, r)
        self.assertIn("memory", str(cm.exception))
        self.assertIn("oom", str(cm.exception))

    def test_nonzero_exit_and_timeout_are_not_ok(self):
        self.fake.reply(200, exec_obj(exit_code=3))
        self.assertFalse(self.sb.exec(["false"]).ok)
        self.fake.reply(200, exec_obj(exit_code=None, signal=9, timed_out=True, killed_by="timeout"))
        r = self.sb.exec(["sleep", "9"], timeout_s=1)
        self.assertTrue(r.timed_out)
        with self.assertRaisesRegex(libdsec.ExecFailed, "timed out"):
            r.check()

    def test_replayed_result(self):
        self.fake.reply(200, exec_obj(replayed=True, seq=0, stdout_b64=b64(b"old\n")))
        r = self.sb.exec(["echo", "old"])
        self.assertTrue(r.replayed)
        self.assertIsNone(r.divergence)

    def test_exec_on_a_paused_sandbox_is_a_conflict(self):
        self.fake.error(409, "FAILED_PRECONDITION", "sandbox is paused")
        with self.assertRaises(libdsec.Conflict):
            self.sb.exec(["true"])

    def test_bad_base64_is_a_protocol_error(self):
        self.fake.reply(200, exec_obj(stdout_b64="***"))
        with self.assertRaises(libdsec.ProtocolError):
            self.sb.exec(["true"])


class FncallExecTest(SandboxTestBase):
    tier = "fncall"

    def test_code_string_with_args(self):
        self.fake.reply(200, exec_obj(stdout_b64=b64(b"1\n")))
        r = self.sb.exec("import sys; print(sys.argv[1])", args=["1"], stdin=b"\x00")
        self.assertRequest("POST", "/v1/sandboxes/sb-t1/exec", {
            "code": "import sys; print(sys.argv[1])", "argv": ["1"], "stdin_b64": "AA=="})
        self.assertEqual(r.stdout, b"1\n")

    def test_code_string_alone(self):
        self.fake.reply(200, exec_obj())
        self.sb.exec("print(1)")
        self.assertRequest("POST", "/v1/sandboxes/sb-t1/exec", {"code": "print(1)"})


class ExecStreamTest(SandboxTestBase):
    def test_chunks_then_result(self):
        exit_obj = exec_obj(exit_code=0, seq=1)
        for k in ("stdout", "stderr", "stdout_b64", "stderr_b64"):
            del exit_obj[k]
        self.fake.reply(200, content_type="application/x-ndjson", chunks=[
            line({"stream": "stdout", "data_b64": b64(b"a\x00")}),
            line({"stream": "stderr", "data_b64": b64(b"err")})
            + line({"stream": "stdout", "data_b64": b64(b"\xffb")}),
            b'{"exit": ' + json.dumps(exit_obj).encode() + b', "deferred_bytes": 3}',
            b"\n",
        ])
        stream = self.sb.exec_stream(["sh", "-c", "x"], stdin=b"in", timeout_s=5)
        chunks = list(stream)
        self.assertRequest("POST", "/v1/sandboxes/sb-t1/exec/stream",
                           {"argv": ["sh", "-c", "x"], "stdin_b64": b64(b"in"), "timeout_s": 5})
        self.assertEqual(chunks, [("stdout", b"a\x00"), ("stderr", b"err"), ("stdout", b"\xffb")])
        r = stream.result
        self.assertEqual((r.exit_code, r.seq, r.stdout, r.stderr), (0, 1, b"a\x00\xffb", b"err"))
        self.assertEqual(stream.deferred_bytes, 3)
        # The connection is clean afterwards and reused.
        self.fake.reply(200, {"status": "ok"})
        self.client.health()
        self.assertEqual({q.connection for q in self.fake.requests}, {1})

    def test_output_arrives_before_the_command_ends(self):
        gate = threading.Event()
        self.addCleanup(gate.set)
        self.fake.reply(200, content_type="application/x-ndjson", chunks=[
            line({"stream": "stdout", "data_b64": b64(b"first")}), gate,
            line({"exit": {"exit_code": 7}})])
        stream = self.sb.exec_stream(["x"])
        self.assertEqual(next(stream), ("stdout", b"first"))  # the daemon is still holding
        gate.set()
        self.assertEqual(stream.wait().exit_code, 7)

    def test_http_error_before_streaming(self):
        self.fake.error(429, "RESOURCE_EXHAUSTED", "too many concurrent execs")
        with self.assertRaises(libdsec.ResourceExhausted):
            self.sb.exec_stream(["true"])
        self.fake.reply(200, {"status": "ok"})
        self.client.health()  # connection still usable

    def test_stream_without_exit_is_a_protocol_error(self):
        self.fake.reply(200, content_type="application/x-ndjson",
                        chunks=[line({"stream": "stdout", "data_b64": ""})])
        stream = self.sb.exec_stream(["true"])
        self.assertEqual(next(stream), ("stdout", b""))
        with self.assertRaisesRegex(libdsec.ProtocolError, "exit"):
            next(stream)
        self.assertIsNone(stream.result)

    def test_error_line_mid_stream(self):
        self.fake.reply(200, content_type="application/x-ndjson", chunks=[
            line({"error": {"code": "INTERNAL", "message": "sandbox died"}})])
        with self.assertRaisesRegex(libdsec.InternalError, "sandbox died"):
            self.sb.exec_stream(["true"]).wait()

    def test_closing_early_drops_the_connection(self):
        gate = threading.Event()
        self.addCleanup(gate.set)
        self.fake.reply(200, content_type="application/x-ndjson", chunks=[
            line({"stream": "stdout", "data_b64": b64(b"x")}), gate,
            line({"exit": {"exit_code": 0}})])
        with self.sb.exec_stream(["yes"]) as stream:
            next(stream)
        gate.set()
        self.fake.reply(200, {"status": "ok"})
        self.client.health()
        self.assertEqual(self.fake.last().connection, 2)


class FilesTest(SandboxTestBase):
    def test_read_file_returns_raw_bytes(self):
        self.fake.reply(200, body=ALL_BYTES, content_type="application/octet-stream")
        data = self.sb.read_file("/work/a b/é.bin")
        req = self.assertRequest("GET", "/v1/sandboxes/sb-t1/files")
        self.assertEqual(req.query, {"path": ["/work/a b/é.bin"]})
        self.assertNotIn("+", req.raw_path)
        self.assertEqual(data, ALL_BYTES)

    def test_read_missing_file(self):
        self.fake.error(404, "NOT_FOUND", "no such file", field="path")
        with self.assertRaises(libdsec.NotFound) as cm:
            self.sb.read_file("/nope")
        self.assertEqual(cm.exception.field, "path")

    def test_write_file_puts_the_exact_bytes_with_mode(self):
        self.fake.reply(204)
        self.sb.write_file("/work/x.bin", ALL_BYTES, mode=0o755)
        req = self.assertRequest("PUT", "/v1/sandboxes/sb-t1/files")
        self.assertEqual(req.query, {"path": ["/work/x.bin"], "mode": ["0755"]})
        self.assertEqual(req.headers["content-type"], "application/octet-stream")
        self.assertEqual(req.body, ALL_BYTES)
        self.fake.reply(204)
        self.sb.write_file("/t.txt", "héllo")
        req = self.fake.last()
        self.assertEqual((req.body, req.query["mode"]), ("héllo".encode(), ["0644"]))

    def test_write_file_checks_mode_and_type(self):
        with self.assertRaises(libdsec.InvalidArgument):
            self.sb.write_file("/x", b"", mode=0o17777)
        with self.assertRaises(TypeError):
            self.sb.write_file("/x", 12)

    def test_list_files(self):
        self.fake.reply(200, {"entries": [
            {"name": "a", "type": "file", "size": 3, "mode": 0o644},
            {"name": "d", "type": "dir", "size": 0, "mode": 0o755}]})
        entries = self.sb.list_files("/work")
        req = self.assertRequest("GET", "/v1/sandboxes/sb-t1/files/list")
        self.assertEqual(req.query, {"path": ["/work"]})
        self.assertEqual(entries, [libdsec.FileEntry("a", "file", 3, 0o644),
                                   libdsec.FileEntry("d", "dir", 0, 0o755)])

    def test_files_on_fncall_are_a_conflict(self):
        self.fake.error(409, "FAILED_PRECONDITION", "fncall sandboxes have no files API")
        with self.assertRaises(libdsec.Conflict):
            self.sb.list_files("/")


class LifecycleTest(SandboxTestBase):
    def test_pack_diff(self):
        out = {"layer": "env:2", "digest": "sha256:00", "size_bytes": 8192}
        self.fake.reply(201, out)
        self.assertEqual(self.sb.pack_diff("env", "2"), out)
        self.assertRequest("POST", "/v1/sandboxes/sb-t1/pack_diff", {"name": "env", "version": "2"})

    def test_pause_resume_refresh_update_state(self):
        self.fake.reply(200, sandbox_obj("sb-t1", state="paused"))
        self.assertEqual(self.sb.pause().state, "paused")
        self.assertRequest("POST", "/v1/sandboxes/sb-t1/pause")
        self.fake.reply(200, sandbox_obj("sb-t1", state="running"))
        self.assertEqual(self.sb.resume().state, "running")
        self.assertRequest("POST", "/v1/sandboxes/sb-t1/resume")
        self.fake.reply(200, sandbox_obj("sb-t1", execs=5))
        self.assertEqual(self.sb.refresh().execs, 5)
        self.assertRequest("GET", "/v1/sandboxes/sb-t1")

    def test_context_manager_deletes(self):
        self.fake.reply(204)
        with self.sb as sb:
            self.assertIs(sb, self.sb)
        self.assertRequest("DELETE", "/v1/sandboxes/sb-t1")

    def test_context_manager_tolerates_an_already_deleted_sandbox(self):
        self.fake.error(404, "NOT_FOUND", "gone")
        with self.sb:
            pass
        self.assertRequest("DELETE", "/v1/sandboxes/sb-t1")

    def test_context_manager_keeps_the_body_exception(self):
        self.fake.error(500, "INTERNAL", "delete failed")
        with self.assertRaises(KeyError):
            with self.sb:
                raise KeyError("from the body")


if __name__ == "__main__":
    unittest.main()

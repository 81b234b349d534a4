# SPDX-License-Identifier: Apache-2.0
"""sandbox.commands: E2B's command API on the daemon's exec endpoints (blocking).

run() without callbacks is one POST .../exec; with on_stdout/on_stderr it
reads POST .../exec/stream and calls them with each piece of output as it
arrives. OutputDispatch (shared with the asyncio client) turns the stream's
byte chunks into text: one incremental UTF-8 decoder per stream, so a
character split across two chunks reaches the callback whole.
"""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Tuple

from . import _protocol as P
from ._protocol import Command, Stdin
from .results import CommandResult

if TYPE_CHECKING:
    from .sandbox import SandboxHandle

# Called with each piece of output as text. In the asyncio client it may
# also be a coroutine function (its result is awaited).
OutputHandler = Callable[[str], object]


class OutputDispatch:
    """Which handler gets which text, for one command's stream."""

    def __init__(self, on_stdout: Optional[OutputHandler],
                 on_stderr: Optional[OutputHandler]) -> None:
        self._handlers = {"stdout": on_stdout, "stderr": on_stderr}
        self._decoders: Dict[str, codecs.IncrementalDecoder] = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in self._handlers}

    def feed(self, stream: str, data: bytes) -> List[Tuple[OutputHandler, str]]:
        name = "stderr" if stream == "stderr" else "stdout"
        handler = self._handlers[name]
        if handler is None:
            return []
        text = self._decoders[name].decode(data)
        return [(handler, text)] if text else []

    def flush(self) -> List[Tuple[OutputHandler, str]]:
        """The text held back at the end (an incomplete UTF-8 sequence, as U+FFFD)."""
        out = []
        for name, handler in self._handlers.items():
            if handler is not None:
                text = self._decoders[name].decode(b"", True)
                if text:
                    out.append((handler, text))
        return out


class Commands:
    """sb.commands: run commands the way E2B's sandbox.commands does."""

    def __init__(self, handle: "SandboxHandle") -> None:
        self._h = handle

    def run(self, cmd: Command, *, timeout: Optional[float] = None, cwd: Optional[str] = None,
            envs: Optional[Mapping[str, str]] = None, stdin: Optional[Stdin] = None,
            on_stdout: Optional[OutputHandler] = None,
            on_stderr: Optional[OutputHandler] = None,
            idempotent: bool = False) -> CommandResult:
        """Runs cmd to its end and returns a CommandResult (.exit_code,
        .stdout, .stderr as str; .stdout_bytes, .stderr_bytes exact).

        cmd: a str is a shell command on the container tier (run by
        /bin/sh -c) and code in the sandbox's language on fncall; a list is
        an argv. timeout: seconds (rounded up; the daemon's default is 60,
        its limit 3600); the command is killed then and .error says so.
        envs are added to the sandbox's environment; stdin is data (str or
        bytes) fed to the command. on_stdout/on_stderr are called with the
        output as text while it runs; if one raises, the exception
        propagates and the connection is dropped (the command runs to its
        end on the daemon). idempotent: see SandboxHandle.exec.
        """
        body = P.command_body(self._h.tier, cmd, timeout=timeout, cwd=cwd, envs=envs,
                              stdin=stdin, idempotent=idempotent)
        if on_stdout is None and on_stderr is None:
            return CommandResult.from_exec(self._h.exec_body(body))
        dispatch = OutputDispatch(on_stdout, on_stderr)
        with self._h.exec_stream_body(body) as stream:
            for name, data in stream:
                for handler, text in dispatch.feed(name, data):
                    handler(text)
            for handler, text in dispatch.flush():
                handler(text)
            result = stream.result
        assert result is not None  # the iteration ends only at the exit line
        return CommandResult.from_exec(result)

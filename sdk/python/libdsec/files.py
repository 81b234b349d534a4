# SPDX-License-Identifier: Apache-2.0
"""sb.files: read, write, list and watch files in a sandbox (blocking)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Literal, Optional, Union, overload

from . import _protocol as P
from ._protocol import WriteData
from .results import FileEntry

if TYPE_CHECKING:
    from .sandbox import DirWatch, SandboxHandle


class Files:
    """sb.files, shaped like E2B's sandbox.files: read(path, format=...),
    write(path, data), list(path), watch_dir(path).

    read() without format= returns this object's default_format: "text" (a
    str, UTF-8 with invalid bytes replaced) on sandboxes made by
    Sandbox.create() or Sandbox.connect(), as in E2B; "bytes" on those made
    by the compatibility constructor Sandbox(...) and by Task, as before.
    Pass format= to get one type whatever made the sandbox (and an exact
    static type: str or bytes instead of Union[str, bytes]).
    """

    def __init__(self, handle: "SandboxHandle", default_format: P.FileFormat = "bytes") -> None:
        if default_format not in ("text", "bytes"):
            raise ValueError("default_format must be 'text' or 'bytes'")
        self._h = handle
        self._default: P.FileFormat = default_format

    @property
    def default_format(self) -> P.FileFormat:
        return self._default

    @overload
    def read(self, path: str, format: Literal["text"]) -> str: ...

    @overload
    def read(self, path: str, format: Literal["bytes"]) -> bytes: ...

    @overload
    def read(self, path: str, format: None = None) -> Union[str, bytes]: ...

    def read(self, path: str, format: Optional[P.FileFormat] = None) -> Union[str, bytes]:
        """Returns the file's content as str ("text") or bytes ("bytes");
        NotFound if it does not exist."""
        fmt = P.check_format(format or self._default)
        return P.file_content(self._h.read_file(path), fmt)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded with encoding, strictly (UnicodeDecodeError on bad bytes).

        Compatibility: kept from before read(format=) existed."""
        return self._h.read_file(path).decode(encoding)

    def write(self, path: str, data: WriteData, mode: int = 0o644) -> None:
        """Writes bytes, str (as UTF-8) or a file object's content, creating
        parent directories."""
        self._h.write_file(path, data, mode=mode)

    def list(self, path: str) -> List[FileEntry]:
        """Returns the directory's entries as FileEntry values (.path set)."""
        return self._h.list_files(path)

    def watch_dir(self, path: str, recursive: bool = False) -> "DirWatch":
        """Watches a directory (container and microvm tiers): returns a
        DirWatch that iterates FileEvent(name, type) as changes happen,
        names relative to path; with recursive, directories below too. As
        E2B's files.watch_dir, but an iterator instead of a callback."""
        return self._h.watch_dir(path, recursive)

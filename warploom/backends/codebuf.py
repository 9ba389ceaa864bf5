"""One indented text buffer for code generation, so generated source reads as if written by hand."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class CodeBuffer:
    def __init__(self, indent: str = "    ") -> None:
        self._lines: list[str] = []
        self._level = 0
        self._indent = indent

    def line(self, text: str = "", comment: str | None = None) -> None:
        """Append one line at the current indent; `comment` goes after it, e.g. the IR op it came from."""
        if not text and comment is None:
            self._lines.append("")
            return
        body = text + (f"  # {comment}" if comment and text else (f"# {comment}" if comment else ""))
        self._lines.append(self._indent * self._level + body)

    def lines(self, block: str) -> None:
        """Append a multi-line template (already dedented), each line at the current indent."""
        for ln in block.strip("\n").splitlines():
            self._lines.append((self._indent * self._level + ln) if ln.strip() else "")

    @contextlib.contextmanager
    def block(self, header: str, comment: str | None = None) -> Iterator[None]:
        """``header:`` then an indented body."""
        self.line(header + ":", comment)
        self._level += 1
        try:
            yield
        finally:
            self._level -= 1

    @contextlib.contextmanager
    def indented(self) -> Iterator[None]:
        """An indented region with no header line (for bracketed argument lists)."""
        self._level += 1
        try:
            yield
        finally:
            self._level -= 1

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"

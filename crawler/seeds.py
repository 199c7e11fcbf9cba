"""Reading seed URLs: one per line, ``#`` comments and blank lines ignored, bad lines reported.

A seed file may be large (millions of lines) and may hold mistakes; the reader streams it,
yields every good URL normalized with its origin, and hands every bad line, with its line
number and the reason, to a callback, so that the good ones are stored and none of the bad
ones is dropped silently.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from crawler.urls import MAX_INPUT_LENGTH, InvalidURLError, normalize_url, origin_of, quoted

__all__ = ["MAX_LINE_BYTES", "RejectedURL", "SeedReader"]

#: The longest seed line read whole, in bytes: the longest text a URL may be given as
#: (:data:`crawler.urls.MAX_INPUT_LENGTH`) in UTF-8 with its line break. A longer line is
#: skipped in chunks of this size and rejected, never held in memory.
MAX_LINE_BYTES = 4 * MAX_INPUT_LENGTH + 2


@dataclass(frozen=True)
class RejectedURL:
    """A seed line that is not a crawlable URL."""

    where: str  # "line 12" of a file, or "argument 3" on the command line
    text: str
    reason: str


class SeedReader:
    """Turn located lines into ``(normalized_url, origin)`` pairs.

    Parameters
    ----------
    on_reject : called with each :class:`RejectedURL` as it is found.
    keep : how many rejects to keep in :attr:`rejected` (all are counted in
        :attr:`rejected_count` and passed to ``on_reject``).
    """

    def __init__(
        self, *, on_reject: Callable[[RejectedURL], None] | None = None, keep: int = 100
    ) -> None:
        self.on_reject = on_reject
        self.keep = keep
        self.rejected: list[RejectedURL] = []
        self.rejected_count = 0
        self.accepted_count = 0

    def pairs(self, lines: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
        """Yield a pair for every good ``(where, text)`` line; record every bad one."""
        for where, raw in lines:
            text = raw.strip()
            if not text or text.startswith("#"):
                continue
            try:
                url = normalize_url(text)
            except InvalidURLError as error:
                self._reject(RejectedURL(where, text[:MAX_INPUT_LENGTH], str(error)))
                continue
            self.accepted_count += 1
            yield url, origin_of(url)

    def lines(self, stream: BinaryIO, label: str = "line") -> Iterator[tuple[str, str]]:
        """``("line 3", text)`` for each line of a binary ``stream`` of UTF-8 text.

        A line longer than :data:`MAX_LINE_BYTES` is rejected (quoted cut short) and skipped
        without being held whole. A line that is not UTF-8 is rejected, with where its first
        bad byte is: a URL's non-ASCII characters must be UTF-8 (RFC 3986 sec. 2.5), and a
        guess at another encoding would store a URL the site never had. A byte-order mark at
        the start of the stream is skipped.
        """
        for number in itertools.count(1):
            data = stream.readline(MAX_LINE_BYTES)
            if not data:
                return
            where = f"{label} {number}"
            if len(data) == MAX_LINE_BYTES and not data.endswith(b"\n"):
                total = len(data) + _skip_line(stream)
                start = data[:100].decode("utf-8", errors="replace")
                self._reject(
                    RejectedURL(
                        where,
                        f"{start}...",
                        f"{start!r}... is a line of {total:,} bytes, longer than the "
                        f"{MAX_LINE_BYTES:,} a seed URL may take: not read",
                    )
                )
                continue
            if number == 1 and data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as error:
                shown = data.decode("utf-8", errors="backslashreplace").strip()
                self._reject(
                    RejectedURL(
                        where,
                        shown,
                        f"{quoted(shown)} is not UTF-8: byte 0x{data[error.start]:02x} at "
                        f"column {error.start + 1}; save the file as UTF-8 (or percent-encode "
                        "the URL)",
                    )
                )
                continue
            yield where, text

    def _reject(self, rejected: RejectedURL) -> None:
        self.rejected_count += 1
        if len(self.rejected) < self.keep:
            self.rejected.append(rejected)
        if self.on_reject is not None:
            self.on_reject(rejected)


def _skip_line(stream: BinaryIO) -> int:
    """Read the rest of the current line in bounded chunks; return how many bytes it had."""
    skipped = 0
    while True:
        chunk = stream.readline(MAX_LINE_BYTES)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped

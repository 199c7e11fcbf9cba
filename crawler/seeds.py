"""Reading seed URLs: one per line, ``#`` comments and blank lines ignored, bad lines reported.

A seed file may be large (millions of lines) and may hold mistakes; the reader streams it,
yields every good URL normalized with its origin, and hands every bad line, with its line
number and the reason, to a callback, so that the good ones are stored and none of the bad
ones is dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from crawler.urls import InvalidURLError, normalize_url, origin_of

__all__ = ["RejectedURL", "SeedReader"]


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
                self._reject(RejectedURL(where, text, str(error)))
                continue
            self.accepted_count += 1
            yield url, origin_of(url)

    def _reject(self, rejected: RejectedURL) -> None:
        self.rejected_count += 1
        if len(self.rejected) < self.keep:
            self.rejected.append(rejected)
        if self.on_reject is not None:
            self.on_reject(rejected)

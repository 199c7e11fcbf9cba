"""URLs a crawl already knows are in the store, so that outlinks are not offered again.

Every fetched page offers its outlinks as new pages; on a real site almost all of them are
known (navigation, popular pages), and each offer is an ``INSERT ... ON CONFLICT DO
NOTHING`` (or a POST to the worker API) that changes nothing. The workers of one crawl share
one :class:`KnownUrls`: URLs they leased or successfully added are remembered, and only the
others are offered. The memory is bounded (the oldest URLs are forgotten first, and a
forgotten URL is merely offered again), and a URL is remembered only after the store took it,
so a failed offer is retried with the next report.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from itertools import islice

__all__ = ["KnownUrls"]


class KnownUrls:
    """A thread-safe, bounded set of URLs known to be in the store (first in, first out)."""

    def __init__(self, capacity: int = 200_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._urls: dict[str, None] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._urls)

    def __contains__(self, url: object) -> bool:
        return url in self._urls

    def unknown(self, urls: Iterable[str]) -> list[str]:
        """The URLs not known yet, each once, in their first order."""
        with self._lock:
            known = self._urls
            return [u for u in dict.fromkeys(urls) if u not in known]

    def remember(self, urls: Iterable[str]) -> None:
        """Mark URLs as in the store, forgetting the oldest beyond ``capacity``."""
        with self._lock:
            known = self._urls
            for url in urls:
                known.pop(url, None)  # re-inserted at the end: recently seen, kept longest
                known[url] = None
            excess = len(known) - self.capacity
            if excess > 0:
                for url in list(islice(known, excess)):
                    del known[url]

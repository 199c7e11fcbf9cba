"""Answers to retried requests: the worker API's lease call made idempotent.

A worker that times out waiting for ``POST /v1/leases`` cannot know whether the server
leased it hosts; retrying blindly would lease more and leave the first batch held by nobody
until its lease expires (its hosts idle for ``lease_seconds``). The client therefore sends a
``request_id`` that stays the same across the retries of one call, and the server answers a
repeated id with the answer it gave (or is still computing) the first time.

:class:`ReplayCache` keeps those answers for ``ttl`` seconds, at most ``capacity`` of them
(oldest dropped first), in memory: a server restart forgets them, and a retry that crosses a
restart is served as a new call (the orphaned lease then expires as any unreported one does).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ReplayCache"]

T = TypeVar("T")


class ReplayCache(Generic[T]):
    """Run ``compute`` once per key within ``ttl`` seconds and hand every caller its answer.

    A caller arriving while the first is still computing waits for it. A computation that
    raises is not remembered: the next call with that key computes again.
    """

    def __init__(
        self,
        ttl: float,
        capacity: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl, self.capacity, self.clock = ttl, capacity, clock
        self._answers: OrderedDict[Hashable, tuple[float, T]] = OrderedDict()
        self._running: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()
        #: Calls answered from the cache (a retry that would otherwise have leased again).
        self.replayed = 0

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The answer for ``key``: remembered, awaited, or computed now."""
        while True:
            with self._lock:
                self._expire()
                if key in self._answers:
                    self.replayed += 1
                    return self._answers[key][1]
                running = self._running.get(key)
                if running is None:
                    running = self._running[key] = threading.Event()
                    break
            running.wait()  # another thread computes this key; then look again
        try:
            answer = compute()
            with self._lock:
                self._answers[key] = (self.clock() + self.ttl, answer)
                while len(self._answers) > self.capacity:
                    self._answers.popitem(last=False)
            return answer
        finally:
            with self._lock:
                del self._running[key]
            running.set()

    def _expire(self) -> None:
        now = self.clock()
        while self._answers:
            key, (expires, _) = next(iter(self._answers.items()))
            if expires > now:
                break
            del self._answers[key]

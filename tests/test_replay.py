"""The worker API's replay cache: one computation per key, its answer to every retry."""

from __future__ import annotations

import threading
import time

import pytest

from service.api.replay import ReplayCache


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_computed_once_until_it_expires() -> None:
    clock = _Clock()
    cache: ReplayCache[int] = ReplayCache(ttl=10.0, clock=clock)
    calls = iter(range(100))
    assert cache.get_or_compute("a", lambda: next(calls)) == 0
    assert cache.get_or_compute("a", lambda: next(calls)) == 0
    assert cache.get_or_compute("b", lambda: next(calls)) == 1
    assert cache.replayed == 1
    clock.now = 10.0  # expired: a new call
    assert cache.get_or_compute("a", lambda: next(calls)) == 2


def test_failures_are_not_remembered_and_capacity_bounds_memory() -> None:
    cache: ReplayCache[str] = ReplayCache(ttl=60.0, capacity=2)

    def fail() -> str:
        raise RuntimeError("store down")

    with pytest.raises(RuntimeError):
        cache.get_or_compute("a", fail)
    assert cache.get_or_compute("a", lambda: "ok") == "ok"
    cache.get_or_compute("b", lambda: "b")
    cache.get_or_compute("c", lambda: "c")  # "a" is the oldest: dropped
    assert cache.get_or_compute("a", lambda: "again") == "again"


def test_a_retry_during_the_first_call_waits_for_its_answer() -> None:
    cache: ReplayCache[int] = ReplayCache(ttl=60.0)
    started = threading.Event()
    computed = []

    def slow() -> int:
        started.set()
        time.sleep(0.2)
        computed.append(1)
        return 42

    answers: list[int] = []
    first = threading.Thread(target=lambda: answers.append(cache.get_or_compute("k", slow)))
    first.start()
    started.wait(5)
    assert cache.get_or_compute("k", slow) == 42  # waited; did not compute again
    first.join(5)
    assert answers == [42] and computed == [1]

"""The worker API's settings: accepted tokens, the lease policy and the request caps."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.cycle.due_urls import DUE_SHARE
from store import LeasePolicy

if TYPE_CHECKING:
    from service.pipeline import ReleaseSummary

__all__ = ["API_VERSION", "ApiSettings"]

#: The API's version, reported by ``/health`` and in the OpenAPI document.
API_VERSION = "1.0"


@dataclass(frozen=True)
class ApiSettings:
    """Tokens accepted, the lease policy, batch caps, the body cap (bytes), OPIC damping."""

    tokens: tuple[str, ...]
    policy: LeasePolicy = dataclasses.field(default_factory=LeasePolicy)
    max_results: int = 1_000
    max_new_urls: int = 10_000
    max_body_bytes: int = 8 * 1024 * 1024
    opic_damping: float = 0.85
    #: Longest wait, seconds, between checks for a new plan period to release (checks also
    #: come at each period's start and every 1 % of a period: :mod:`service.release_timing`;
    #: None: never, e.g. when a ``crawlplan crawl`` on the same store releases them).
    release_every: float | None = 5.0
    min_delay_seconds: float = 1.0
    #: The share of a bucket's planned revisit interval after which its pages are due in a
    #: release (:func:`service.pipeline.release_period`); 1.0 makes every bucket a strict
    #: round robin, what a uniform recrawl kept for comparison wants (``crawlplan demo``).
    due_share: float = DUE_SHARE
    #: Called with every release the app's period releaser makes (its figures, for a caller
    #: that reports them, as ``crawlplan demo`` does); None: nothing but the log.
    on_release: Callable[[ReleaseSummary], None] | None = None
    #: Accept URLs of private, loopback and link-local addresses (``serve --allow-private``:
    #: a synthetic web on loopback); off, they are rejected where they are queued.
    allow_private: bool = False

    def __post_init__(self) -> None:
        if not self.tokens or any(len(t) < 16 for t in self.tokens):
            raise ValueError("the worker API needs tokens of at least 16 characters")
        if not 0.0 < self.due_share <= 1.0:
            raise ValueError(f"due_share must lie in (0, 1], got {self.due_share!r}")

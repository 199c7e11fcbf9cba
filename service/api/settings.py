"""The worker API's settings: accepted tokens, the lease policy and the request caps."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from store import LeasePolicy

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
    #: Accept URLs of private, loopback and link-local addresses (``serve --allow-private``:
    #: a synthetic web on loopback); off, they are rejected where they are queued.
    allow_private: bool = False

    def __post_init__(self) -> None:
        if not self.tokens or any(len(t) < 16 for t in self.tokens):
            raise ValueError("the worker API needs tokens of at least 16 characters")

"""Politeness as small pure functions: how long to wait before the next request to a host.

Three inputs decide it, and the largest wins: the host's robots.txt ``Crawl-delay`` (clamped
to configured bounds: some sites ask for an hour, which would starve them, some for 0), a
floor derived from how slow the host answered (Heritrix waits 5 x the last fetch duration;
a slow host is a busy host), and, after errors, exponential backoff with full jitter (AWS
"Exponential Backoff and Jitter": spreads retries of many workers instead of synchronizing
them), or the server's own ``Retry-After``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime

__all__ = ["PolitenessPolicy", "backoff_seconds", "parse_retry_after", "request_delay"]


@dataclass(frozen=True)
class PolitenessPolicy:
    """Per-host pacing settings, all in seconds.

    Attributes
    ----------
    min_delay : least time between two requests to one host.
    max_delay : most; a larger robots.txt Crawl-delay is clamped to this.
    duration_factor : wait at least this multiple of the last response time (Heritrix uses 5).
    backoff_base, backoff_cap : exponential backoff after consecutive errors, base * 2**k,
        capped, with full jitter.
    max_retry_after : a ``Retry-After`` longer than this is clamped (a misconfigured server
        must not park a host for a year).
    max_per_host : requests to one host in flight at once (a count, not seconds). Each runs
        in a lane of its own with its own connection, and each lane waits the delay above
        after its own request: a host sees up to ``max_per_host`` requests per delay. 1 (the
        default) is one request at a time, as Heritrix and Nutch crawl a host.
    """

    min_delay: float = 1.0
    max_delay: float = 60.0
    duration_factor: float = 5.0
    backoff_base: float = 2.0
    backoff_cap: float = 3600.0
    max_retry_after: float = 86_400.0
    max_per_host: int = 1

    def __post_init__(self) -> None:
        if self.max_per_host < 1:
            raise ValueError("max_per_host must be >= 1 (requests in flight to one host)")
        if not 0 <= self.min_delay <= self.max_delay:
            raise ValueError("need 0 <= min_delay <= max_delay")
        if self.duration_factor < 0 or self.backoff_base <= 0 or self.backoff_cap <= 0:
            raise ValueError("duration_factor >= 0, backoff_base > 0 and backoff_cap > 0")


def request_delay(
    policy: PolitenessPolicy, crawl_delay: float | None, last_duration: float | None
) -> float:
    """Seconds to wait after a successful request before the next one to the same host."""
    delay = policy.min_delay
    if crawl_delay is not None and crawl_delay > 0:
        delay = max(delay, min(crawl_delay, policy.max_delay))
    if last_duration is not None and last_duration > 0:
        delay = max(delay, min(policy.duration_factor * last_duration, policy.max_delay))
    return delay


def backoff_seconds(
    policy: PolitenessPolicy, consecutive_errors: int, rng: random.Random | None = None
) -> float:
    """Full-jitter exponential backoff after ``consecutive_errors`` (>= 1) failures in a row.

    Uniform on [0, min(cap, base * 2**(k-1))], never below ``min_delay``.
    """
    if consecutive_errors < 1:
        return policy.min_delay
    ceiling = min(policy.backoff_cap, policy.backoff_base * 2.0 ** (consecutive_errors - 1))
    return max(policy.min_delay, (rng or random).uniform(0.0, ceiling))


def parse_retry_after(
    value: str | None, now: datetime, policy: PolitenessPolicy | None = None
) -> float | None:
    """Seconds a ``Retry-After`` header asks us to wait, or None when absent or unreadable.

    RFC 9110 sec. 10.2.3: either delay-seconds or an HTTP-date. Dates in the past mean 0;
    values beyond ``policy.max_retry_after`` are clamped to it.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    seconds: float
    if text.isascii() and text.isdigit():
        seconds = float(text)
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = max(0.0, (when - now) / timedelta(seconds=1))
    limit = (policy or PolitenessPolicy()).max_retry_after
    return min(seconds, limit)

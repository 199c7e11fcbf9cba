"""robots.txt per RFC 9309, parsed by Protego (Scrapy's parser), with the status-code rules.

RFC 9309 sec. 2.3.1: a 2xx robots.txt is obeyed; 4xx ("unavailable") means no rules, crawl
everything; 5xx or a network error ("unreachable") means assume complete disallow, for now,
and try again later. Redirects are followed by the fetcher (up to five hops). Rules are cached
for at most 24 hours (sec. 2.4). The file is capped at 500 KiB (sec. 2.5): longer content
is cut there before parsing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from protego import Protego

__all__ = ["MAX_ROBOTS_BYTES", "ROBOTS_TTL", "RobotsCache", "RobotsRules", "robots_url"]

MAX_ROBOTS_BYTES = 500 * 1024
ROBOTS_TTL = timedelta(hours=24)
#: How soon to ask again after an unreachable (5xx / network error) robots.txt.
UNREACHABLE_RETRY = timedelta(minutes=30)


def robots_url(origin: str) -> str:
    """The robots.txt URL of an origin ``scheme://host[:port]``."""
    return origin.rstrip("/") + "/robots.txt"


@dataclass(frozen=True)
class RobotsRules:
    """What robots.txt allows one user agent on one host, and until when we may trust it."""

    status: int | None
    body: str | None
    fetched_at: datetime
    expires_at: datetime
    _parser: Protego | None

    @classmethod
    def from_response(
        cls,
        status: int | None,
        body: str | bytes | None,
        fetched_at: datetime,
        *,
        unreachable_retry: timedelta = UNREACHABLE_RETRY,
    ) -> RobotsRules:
        """Rules from a robots.txt fetch; ``status`` None means the request itself failed.
        Unreachable rules (5xx, no answer) expire after ``unreachable_retry``."""
        text: str | None
        if isinstance(body, bytes):
            text = body[:MAX_ROBOTS_BYTES].decode("utf-8", errors="replace")
        else:
            text = body[:MAX_ROBOTS_BYTES] if body is not None else None
        ok = status is not None and 200 <= status < 300
        parser = Protego.parse(text or "") if ok else None
        unreachable = status is None or status >= 500
        ttl = unreachable_retry if unreachable else ROBOTS_TTL
        return cls(status, text if ok else None, fetched_at, fetched_at + ttl, parser)

    @classmethod
    def restore(
        cls, status: int | None, body: str | None, fetched_at: datetime, expires_at: datetime
    ) -> RobotsRules:
        """Rules as stored with a host (see :meth:`from_response`)."""
        rules = cls.from_response(status, body, fetched_at)
        return cls(rules.status, rules.body, fetched_at, expires_at, rules._parser)

    @property
    def unreachable(self) -> bool:
        """5xx or network error: crawl nothing on this host until the rules expire."""
        return self.status is None or self.status >= 500

    def allows(self, url: str, agent: str) -> bool:
        """Whether ``agent`` may fetch ``url``."""
        if self.unreachable:
            return False
        if self._parser is None:  # 4xx (or 3xx that the fetcher did not resolve): no rules
            return True
        return bool(self._parser.can_fetch(url, agent))

    def crawl_delay(self, agent: str) -> float | None:
        """The Crawl-delay (seconds) of the group that applies to ``agent``, if any."""
        if self._parser is None:
            return None
        delay = self._parser.crawl_delay(agent)
        return float(delay) if delay is not None else None

    def sitemaps(self) -> list[str]:
        """Sitemap URLs the file lists."""
        return list(self._parser.sitemaps) if self._parser is not None else []

    def expired(self, now: datetime) -> bool:
        """Whether to fetch robots.txt again before the next request."""
        return now >= self.expires_at


class RobotsCache:
    """The robots.txt rules a pool of workers has read, per origin (thread-safe, bounded:
    the oldest entries are forgotten first, and a forgotten host's URLs are merely not
    screened when they are found).

    Workers put the rules of every host they lease (stored with the host, or fetched again)
    and screen the URLs they discover with them (:meth:`disallows`): a URL the host's
    rules disallow is stored as unfetchable, never as a candidate.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._rules: dict[str, RobotsRules] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rules)

    def put(self, origin: str, rules: RobotsRules) -> None:
        """Remember ``rules`` as the origin's latest (replacing older ones)."""
        with self._lock:
            self._rules.pop(origin, None)
            self._rules[origin] = rules
            if len(self._rules) > self.capacity:
                del self._rules[next(iter(self._rules))]

    def get(self, origin: str) -> RobotsRules | None:
        """The origin's rules, if known."""
        return self._rules.get(origin)

    def disallows(self, url: str, origin: str, agent: str) -> RobotsRules | None:
        """The rules that disallow ``url`` (of ``origin``) to ``agent``; None when they allow
        it or are not known. Rules of an unreachable robots.txt (5xx) say nothing about a
        URL: its pages stay candidates, checked when they are fetched. Expired rules are
        used: a page they block is checked again when they expire (its due time)."""
        rules = self._rules.get(origin)
        if rules is None or rules.unreachable or rules.allows(url, agent):
            return None
        return rules

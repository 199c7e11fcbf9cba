"""A synthetic web with ground truth: hosts, pages, links, and when each page really changed.

Pure and seeded: the same :class:`WebConfig` gives the same web. Times are seconds since the
web's epoch (the server maps them to wall-clock time); change rates are changes per second so
that a test can watch pages change within seconds.

What it models, because a crawler meets all of it on the real web:

* change rates spread over orders of magnitude (log-uniform between ``rate_low`` and
  ``rate_high``, or a two-cluster mixture of fast churners and near-static pages);
* correlated changes: a section-wide event (a site redesign, a navigation change) changes
  every page of the section at once;
* trivial edits: every rendering carries the request time and a visit counter, which a change
  detector must not count as changes;
* births and deaths: a page exists in ``[born, dies)``; before it is 404, after it is 410;
* power-law in-degrees: link targets are drawn with Zipf weights, mostly inside the host;
* links into a robots-disallowed section: ``private_links`` links per page to URLs under
  ``/private/`` (each page its own), which every host's default robots.txt disallows and the
  server answers if asked, so its request log shows a crawler that fetches them;
* garbage: per host, some pages answer broken HTTP on every request (:data:`GARBAGE_MODES`),
  chosen from the seed, so a test knows which page should end as which error. Garbage is
  how a page is served, not a change: its ground truth (versions, change times) is untouched.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "ERROR_GARBAGE",
    "GARBAGE_MODES",
    "LENIENT_GARBAGE",
    "HostBehavior",
    "SyntheticWeb",
    "WebConfig",
]

#: Answers no client can read whole, each ending the connection:
#: ``truncated`` (Content-Length larger than the body sent, then the connection closes),
#: ``conflicting-length`` (two different Content-Length headers),
#: ``bad-gzip`` (``Content-Encoding: gzip`` on a body that is not gzip),
#: ``reset`` (TCP RST right after reading the request),
#: ``reset-mid-headers`` (the status line and part of a header, then RST),
#: ``bad-status-line`` (bytes that are not HTTP, then the connection closes).
ERROR_GARBAGE = (
    "truncated",
    "conflicting-length",
    "bad-gzip",
    "reset",
    "reset-mid-headers",
    "bad-status-line",
)
#: Complete answers that carry the real page, badly: ``short-length`` (Content-Length
#: smaller than the body: junk follows the declared bytes, then the connection closes),
#: ``bad-bytes`` (bytes invalid in the declared UTF-8, in a comment and an attribute),
#: ``bogus-charset`` (a charset no decoder accepts). A client reads the page from them.
LENIENT_GARBAGE = ("short-length", "bad-bytes", "bogus-charset")
GARBAGE_MODES = ERROR_GARBAGE + LENIENT_GARBAGE

_WORDS = (
    "city",
    "council",
    "budget",
    "transport",
    "river",
    "station",
    "market",
    "weather",
    "report",
    "election",
    "school",
    "museum",
    "concert",
    "league",
    "match",
    "season",
    "price",
    "index",
    "energy",
    "water",
    "housing",
    "health",
    "science",
    "library",
    "garden",
    "bridge",
    "harbour",
    "airport",
    "festival",
    "review",
    "update",
    "notice",
    "schedule",
    "result",
    "policy",
    "court",
    "trial",
    "vote",
    "survey",
    "study",
    "launch",
    "release",
    "storm",
    "traffic",
    "parking",
    "ticket",
)


@dataclass(frozen=True)
class HostBehavior:
    """How one host's server behaves.

    ``last_modified``: ``truthful`` (the real last change), ``now`` (the request time),
    ``future`` (a day ahead), ``static`` (never moves), ``none`` (no header).
    ``error_rate``: share of page requests answered 503 (or 429) with ``Retry-After``.
    ``server_error_rate``: share answered 500. ``garbage``: the :data:`GARBAGE_MODES` this
    host answers with. ``garbage_share``: share of the host's pages (never its home page)
    that answer garbage on every request, each in one mode of ``garbage`` (in turn, chosen
    from the seed: :meth:`SyntheticWeb.garbage_mode`). ``garbage_rate``: share of the other
    page requests answered in a random mode of ``garbage`` (default: truncated, reset,
    bad-bytes). ``latency``: seconds before each answer. ``robots``: robots.txt body (None:
    404); ``robots_status`` overrides its status.
    """

    last_modified: str = "truthful"
    etag: bool = True
    conditional: bool = True
    robots: str | None = "User-agent: *\nDisallow: /private/\n"
    robots_status: int = 200
    error_rate: float = 0.0
    error_status: int = 503
    retry_after: float = 1.0
    server_error_rate: float = 0.0
    garbage_rate: float = 0.0
    garbage: tuple[str, ...] = ()
    garbage_share: float = 0.0
    latency: float = 0.0

    def __post_init__(self) -> None:
        unknown = set(self.garbage) - set(GARBAGE_MODES)
        if unknown:
            raise ValueError(f"unknown garbage modes {sorted(unknown)}; known: {GARBAGE_MODES}")
        if not 0.0 <= self.garbage_share <= 1.0 or not 0.0 <= self.garbage_rate <= 1.0:
            raise ValueError("garbage_share and garbage_rate are shares in [0, 1]")
        if self.garbage_share > 0 and not self.garbage:
            raise ValueError("garbage_share needs the garbage modes to answer with")

    @property
    def garbage_modes(self) -> tuple[str, ...]:
        """The modes random garbage (``garbage_rate``) is drawn from."""
        return self.garbage or ("truncated", "reset", "bad-bytes")


@dataclass(frozen=True)
class WebConfig:
    """The shape of a synthetic web. Rates are changes per second.

    ``private_links``: links each page carries to URLs of its own under ``/private/``
    (:meth:`SyntheticWeb.private_paths`), a section robots.txt disallows on every host with
    the default :class:`HostBehavior`; none of them is a page of the web.
    """

    hosts: int = 4
    pages_per_host: int = 30
    sections_per_host: int = 3
    links_per_page: int = 6
    cross_host_share: float = 0.15
    rate_low: float = 1e-3
    rate_high: float = 1.0
    static_share: float = 0.0
    section_rate: float = 0.0
    born_share: float = 0.0
    dies_share: float = 0.0
    horizon: float = 3600.0
    words_per_page: int = 120
    seed: int = 0
    behaviors: dict[int, HostBehavior] = field(default_factory=dict)
    private_links: int = 0

    def __post_init__(self) -> None:
        if self.private_links < 0:
            raise ValueError(f"private_links must be >= 0, got {self.private_links}")

    def behavior(self, host: int) -> HostBehavior:
        """The behavior of host ``host`` (default: a well-behaved server)."""
        return self.behaviors.get(host, HostBehavior())


class SyntheticWeb:
    """The pages of a :class:`WebConfig` and their ground truth.

    Attributes
    ----------
    host_of, section_of : int arrays (N,) -- host and section of each page.
    rate : float array (N,) -- the page's own change rate (changes / s).
    born, dies : float arrays (N,) -- when the page appears and disappears (s; inf = never).
    links : list of int arrays -- outlinks of each page (page ids).
    garbage : dict -- page id -> the garbage mode it answers with on every request.
    """

    def __init__(self, config: WebConfig) -> None:
        self.config = config
        c = config
        rng = np.random.default_rng(c.seed)
        n = c.hosts * c.pages_per_host
        self.n_pages = n
        self.host_of = np.repeat(np.arange(c.hosts), c.pages_per_host)
        self.index_in_host = np.tile(np.arange(c.pages_per_host), c.hosts)
        self.section_of = self.index_in_host % c.sections_per_host
        log_rate = rng.uniform(np.log(c.rate_low), np.log(c.rate_high), n)
        self.rate = np.exp(log_rate)
        static = rng.random(n) < c.static_share
        self.rate[static] = 0.0
        self.born = np.where(rng.random(n) < c.born_share, rng.uniform(0, c.horizon, n), 0.0)
        # The first page of every host is its home page: always there, the crawl's way in.
        self.born[self.index_in_host == 0] = 0.0
        dies = rng.random(n) < c.dies_share
        dies[self.index_in_host == 0] = False
        self.dies = np.where(dies, self.born + rng.uniform(0, c.horizon, n), np.inf)
        self._changes = [self._poisson(rng, r, c.horizon) for r in self.rate]
        self._changed_before = self._past(c, self.rate, n)
        self._section_changes = {
            (h, s): self._poisson(rng, c.section_rate, c.horizon)
            for h in range(c.hosts)
            for s in range(c.sections_per_host)
        }
        self.links = self._link_graph(rng)
        self.garbage = self._garbage_pages()

    @staticmethod
    def _past(c: WebConfig, rate: np.ndarray, n: int) -> np.ndarray:
        """When each page last changed before the epoch (s, <= 0): a web has a past. A page
        there at the epoch last changed an exponential time before it (the backward
        recurrence time of its Poisson changes, page and section together: what a real
        server's Last-Modified says of an old page), a static one ten horizons before, as
        the simulator's worlds do (:class:`scenarios.simulator`). Drawn from a stream of
        its own, so every other draw of the web stays what it was."""
        past = np.random.default_rng([c.seed, 1])
        total = rate + c.section_rate
        with np.errstate(divide="ignore"):
            back = past.exponential(1.0, n) / np.where(total > 0, total, 1.0)
        return np.where(total > 0, -back, -10.0 * c.horizon)

    @staticmethod
    def _poisson(rng: np.random.Generator, rate: float, horizon: float) -> np.ndarray:
        if rate <= 0:
            return np.empty(0)
        count = rng.poisson(rate * horizon)
        return np.sort(rng.uniform(0.0, horizon, count))

    def _link_graph(self, rng: np.random.Generator) -> list[np.ndarray]:
        c = self.config
        # Zipf weights over each host's pages: a few pages get most in-links.
        weights = 1.0 / np.arange(1, c.pages_per_host + 1) ** 1.2
        weights /= weights.sum()
        links = []
        for page in range(self.n_pages):
            host = int(self.host_of[page])
            k = c.links_per_page
            local = rng.choice(c.pages_per_host, size=k, p=weights)
            targets = host * c.pages_per_host + local
            foreign = rng.random(k) < c.cross_host_share
            if c.hosts > 1 and foreign.any():
                other = rng.integers(0, c.hosts, foreign.sum())
                targets[foreign] = other * c.pages_per_host + rng.choice(
                    c.pages_per_host, size=int(foreign.sum()), p=weights
                )
            # Every page also links to the next one of its host, so that all are reachable.
            nxt = host * c.pages_per_host + (int(self.index_in_host[page]) + 1) % c.pages_per_host
            targets = np.unique(np.append(targets, nxt))
            links.append(targets[targets != page])
        return links

    def _garbage_pages(self) -> dict[int, str]:
        """Page -> garbage mode, for the hosts with a ``garbage_share``. A stream of its own
        per host, so that adding garbage changes nothing else of the web."""
        c = self.config
        chosen: dict[int, str] = {}
        for host, behavior in sorted(c.behaviors.items()):
            count = round(behavior.garbage_share * (c.pages_per_host - 1))
            if count == 0 or not 0 <= host < c.hosts:
                continue
            rng = np.random.default_rng([c.seed, 7919, host])
            indexes = rng.choice(np.arange(1, c.pages_per_host), size=count, replace=False)
            for k, index in enumerate(indexes):
                mode = behavior.garbage[k % len(behavior.garbage)]
                chosen[host * c.pages_per_host + int(index)] = mode
        return chosen

    def garbage_mode(self, page: int) -> str | None:
        """The garbage mode the page answers with on every request, or None."""
        return self.garbage.get(page)

    # -- addressing ------------------------------------------------------------------------
    def path(self, page: int) -> str:
        """URL path of a page."""
        return f"/s{int(self.section_of[page])}/p{int(self.index_in_host[page])}.html"

    def private_paths(self, page: int) -> list[str]:
        """The ``/private/`` URL paths page ``page`` links to (``config.private_links`` of
        them, none a page of the web)."""
        stem = f"/private/s{int(self.section_of[page])}/p{int(self.index_in_host[page])}"
        return [f"{stem}-{j}.html" for j in range(self.config.private_links)]

    def page_at(self, host: int, path: str) -> int | None:
        """The page id a host serves at ``path``, or None."""
        parts = path.strip("/").split("/")
        if len(parts) != 2 or not parts[0].startswith("s") or not parts[1].startswith("p"):
            return None
        try:
            index = int(parts[1][1:].removesuffix(".html"))
            section = int(parts[0][1:])
        except ValueError:
            return None
        if not 0 <= index < self.config.pages_per_host or section != index % (
            self.config.sections_per_host
        ):
            return None
        return host * self.config.pages_per_host + index

    # -- ground truth ------------------------------------------------------------------------
    def change_times(self, page: int) -> np.ndarray:
        """Every time (s) the page's content really changed, sorted."""
        own = self._changes[page]
        key = (int(self.host_of[page]), int(self.section_of[page]))
        merged = np.concatenate([own, self._section_changes[key]])
        merged = merged[merged >= self.born[page]]
        return np.sort(merged)

    def version(self, page: int, t: float) -> int:
        """Number of real changes of the page up to time ``t``."""
        return int(np.searchsorted(self.change_times(page), t, side="right"))

    def last_change(self, page: int, t: float) -> float:
        """Time of the latest real change at or before ``t``: if none since the epoch, its
        birth for a page born later, else its last change before the epoch (negative)."""
        times = self.change_times(page)
        k = int(np.searchsorted(times, t, side="right"))
        if k:
            return float(times[k - 1])
        born = float(self.born[page])
        return born if born > 0 else float(self._changed_before[page])

    def alive(self, page: int, t: float) -> bool:
        """Whether the page exists at ``t``."""
        return bool(self.born[page] <= t < self.dies[page])

    # -- content -----------------------------------------------------------------------------
    def body_text(self, page: int, version: int) -> str:
        """The article text of a page version (deterministic)."""
        digest = hashlib.blake2b(f"{self.config.seed}:{page}:{version}".encode(), digest_size=8)
        rng = np.random.default_rng(int.from_bytes(digest.digest(), "big"))
        words = rng.choice(_WORDS, size=self.config.words_per_page)
        return " ".join(str(w) for w in words)

    def title(self, page: int) -> str:
        """The page's title."""
        return f"Host {int(self.host_of[page])} page {int(self.index_in_host[page])}"

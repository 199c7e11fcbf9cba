"""Crawler workers: lease hosts from the store, fetch their pages politely, report, repeat.

One :class:`CrawlWorker` runs in one thread and crawls the hosts it leases each in a thread
of its own, with an HTTP session per host; :func:`run_crawl` starts a pool of workers. For
each lease (one host, some of its due pages) a worker:

1. makes sure it has the host's robots.txt (fetched again when the stored copy expired);
   unreachable robots.txt (5xx, no answer) means the host is not crawled for now (RFC 9309),
   and the host's count of consecutive unreachable robots.txt fetches goes up by one (a
   reachable one sets it to 0); at ``robots_give_up_after`` the host is given up: handed
   back with ``given_up_at``, which takes every page of it out of the due set
   (:class:`store.HostUpdate`), so that ``until_idle`` crawls end;
2. fetches each page no sooner than the host's delay after the previous request ended
   (:func:`~crawler.politeness.request_delay`), conditionally when it has validators;
3. turns what it saw into observations (reported every ``report_every`` fetches or
   ``report_seconds``, whichever comes first, so a killed worker leaves little unrecorded):
   changed or not by content signature, 304 as "not changed", redirects, 404/410, errors;
   429/503 with Retry-After or repeated errors end the lease early with the host backed off,
   and unfetched pages go back to the pool;
4. adds the outlinks and redirect targets it found as new pages, and hands the host back with
   its politeness state, in one transaction with the observations (``LeaseQueue.finish``).
   What it found is screened first: a URL outside the crawl scope (:mod:`crawler.scope`) is
   dropped; a URL that its host's robots.txt, as the pool last read it
   (:class:`~crawler.robots.RobotsCache`), disallows is added as unfetchable (status
   ``blocked``, checked again when those rules expire), never as a candidate. A leased page
   robots.txt disallows is reported ``blocked`` without a request: it becomes unfetchable
   too, not a fetch;
   each page read moves its OPIC cash to its outlinks in the report's transaction (the
   arithmetic from :mod:`estimators.opic`), and :func:`run_crawl` spreads the virtual page's
   cash and stores every page's importance when it starts and ends (:mod:`store.importance`).

A worker stops between two fetches when its stop event is set or its deadline
(``seconds``) passes: in-flight fetches finish (within the fetch's ``total_timeout``) and
are reported, leases are released.

While a worker crawls a batch, a heartbeat thread renews the batch's leases every third of
the lease time, so leases can be short (``lease.seconds``, 60 s): a worker killed with
SIGKILL renews nothing, and its hosts go to the others within a lease time. Worker names
are ``{host name}-{process id}-{n}``, unique per machine and process.

A host the address policy refuses (it resolves to a private or loopback address and
``FetchLimits.allow_private`` is off) is the operator's choice, not the host's fault: its
pages are counted as ``refused`` and handed back unfetched and still due, the host is not
backed off (asked again after :data:`REFUSED_RETRY`; with ``until_idle`` at once, and a
worker that leases only refused hosts stops), and the pool says once per host what was
refused and why.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urljoin

from crawler.fetch import Fetcher, FetchLimits, FetchOutcome
from crawler.known_urls import KnownUrls
from crawler.links import extract_links, parse_html
from crawler.noise import NOISE_RECHECK, NOISE_TWINS, NoiseRules, learn_noise
from crawler.politeness import (
    PolitenessPolicy,
    backoff_seconds,
    parse_retry_after,
    request_delay,
)
from crawler.robots import UNREACHABLE_RETRY, RobotsCache, RobotsRules, robots_url
from crawler.scope import CrawlScope
from crawler.signature import (
    answer_signature,
    content_changed,
    document_text,
    main_text,
    page_kind,
    page_signature,
)
from crawler.sitemaps import SitemapError, parse_sitemap
from crawler.urls import InvalidURLError, normalize_url, origin_of
from crawler.work_queue import WorkQueue
from estimators.opic import DEFAULT_DAMPING, crawl_cash_split, crawl_virtual_gift
from store import FetchResult, HostUpdate, Lease, LeasedPage
from store.database import Database
from store.errors import StoreError
from store.importance import CashSplit, spread_virtual_cash
from store.types import utcnow

__all__ = [
    "REFUSED_RETRY",
    "CrawlSettings",
    "CrawlStats",
    "CrawlWorker",
    "default_worker_prefix",
    "run_crawl",
    "run_workers",
]

log = logging.getLogger(__name__)

#: Content types of a sitemap (sitemaps.org: XML; some servers say text/plain).
_SITEMAP_TYPES = ("application/xml", "text/xml", "text/plain")

#: Statuses after which the host is backed off and the rest of the lease given back.
_BACK_OFF = {429, 503}

#: An idle worker thread doubles its wait after each lease that found nothing, up to this many
#: times ``CrawlSettings.idle_sleep``, and waits ``idle_sleep`` again once it leases work.
#: Eight threads asking every 0.2 s kept a worker API process at a fifth of a core with
#: nothing due; at most 1 s between asks, the first page a release makes due waits at most
#: that long.
IDLE_BACKOFF = 5.0

#: How soon a host the address policy refused is leased again (not a backoff: a crawl
#: started with private addresses allowed takes it within this time).
REFUSED_RETRY = 10.0


@dataclass(frozen=True)
class CrawlSettings:
    """How workers crawl. ``agent`` is the robots.txt user-agent token."""

    agent: str = "crawlplan"
    user_agent: str = "crawlplan/0.1 (+https://example.invalid/crawlplan)"
    politeness: PolitenessPolicy = field(default_factory=PolitenessPolicy)
    limits: FetchLimits = field(default_factory=FetchLimits)
    max_urls: int = 50
    #: Hosts one worker thread crawls at once, each in a thread of its own. The worker
    #: leases more as hosts finish, so a host that asks for a long Crawl-delay, whose lease
    #: may take minutes, holds up only its own thread, not the hosts leased with it.
    hosts_in_flight: int = 32
    idle_sleep: float = 0.2
    max_errors_per_lease: int = 3
    error_retry: timedelta = timedelta(minutes=5)
    #: Report a host's observations once this many are waiting, or once the oldest waited
    #: ``report_seconds``: what a killed worker leaves unrecorded (fetched again once its
    #: lease expires) stays small in pages and in time, while a fast host's pages go to the
    #: store in few transactions (a lease of up to 25 pages in one).
    report_every: int = 25
    report_seconds: float = 10.0
    #: Send If-Modified-Since too. Off by default: servers whose Last-Modified never moves
    #: answer 304 to every such request and hide real changes; ETags are trusted, and this
    #: is meant to be enabled per host once Last-Modified is judged reliable there.
    if_modified_since: bool = False
    #: OPIC: share of a page's cash its outlinks get (the rest goes to the virtual page).
    opic_damping: float = DEFAULT_DAMPING
    #: Read the sitemaps a host's robots.txt lists (same host only, at most
    #: ``max_sitemaps``) when its robots.txt is fetched, and record their lastmod dates as
    #: change notifications.
    sitemaps: bool = True
    max_sitemaps: int = 3
    #: Which discovered URLs are followed (:mod:`crawler.scope`): out-of-scope ones are dropped.
    scope: CrawlScope = field(default_factory=CrawlScope)
    #: Give a host up after this many consecutive robots.txt fetches found it unreachable
    #: (connection refused, DNS failure, timeout, 5xx): its pages leave the due set until a
    #: user seeds one of its URLs again. 0: never give up. (``crawl.robots_give_up_after``.)
    robots_give_up_after: int = 3
    #: How soon an unreachable robots.txt is asked again (RFC 9309: "later"); a host is thus
    #: given up about ``(robots_give_up_after - 1) * robots_retry`` after its first failure.
    robots_retry: timedelta = UNREACHABLE_RETRY
    #: Twin fetches that learn a host's noise rules (:mod:`crawler.noise`): this many more
    #: requests per host every ``NOISE_RECHECK``; 0: no twin fetches, no rules learned
    #: (``crawl.noise_twins``).
    noise_twins: int = NOISE_TWINS

    def __post_init__(self) -> None:
        if self.hosts_in_flight < 1:
            raise ValueError("hosts_in_flight must be >= 1")
        if self.robots_give_up_after < 0:
            raise ValueError("robots_give_up_after must be >= 0 (0: never give up)")
        if self.robots_retry <= timedelta(0):
            raise ValueError("robots_retry must be positive")
        if self.noise_twins < 0:
            raise ValueError("noise_twins must be >= 0 (0: no noise rules learned)")


@dataclass
class CrawlStats:
    """Counters shared by the workers of one crawl (guarded by ``lock``)."""

    fetched: int = 0
    changed: int = 0
    not_modified: int = 0
    errors: int = 0
    blocked: int = 0
    discovered: int = 0
    #: Discovered URLs robots.txt disallows, added as unfetchable pages (not candidates).
    unfetchable: int = 0
    #: Discovered URLs outside the crawl scope, dropped.
    out_of_scope: int = 0
    leases: int = 0
    active_hosts: int = 0
    #: Calls to the store or the worker API that failed (their batch is crawled again).
    queue_errors: int = 0
    #: Change notifications recorded from sitemaps' lastmod dates.
    notified: int = 0
    #: Steps or batches that raised something unforeseen (logged with the traceback; the
    #: page got an error, the host was backed off, the worker went on).
    worker_errors: int = 0
    #: Leased pages not fetched because their host resolves to a private, loopback or
    #: reserved address and the crawl does not allow those (handed back, still due; each
    #: page counted once per process).
    refused: int = 0
    #: Hosts given up: their robots.txt was unreachable ``robots_give_up_after`` times in a row.
    given_up: int = 0
    #: Twin fetches of hosts' noise checks (:mod:`crawler.noise`), and the checks that
    #: found noise (``noisy_hosts`` in ``crawlplan status`` counts hosts with rules instead).
    noise_checks: int = 0
    noise_found: int = 0
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        """Add to counters atomically."""
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def pages_per_second(self) -> float:
        """Fetches per second since the crawl started."""
        return self.fetched / max(time.monotonic() - self.started, 1e-9)


@dataclass
class _HostCrawl:
    """The state of one leased host while a worker crawls it."""

    lease: Lease
    rules: RobotsRules | None
    pending: deque[LeasedPage]
    next_request: float  # monotonic time of the earliest polite next request
    host: HostUpdate = field(default_factory=HostUpdate)
    results: list[FetchResult] = field(default_factory=list)
    #: Monotonic time results have been waiting to be reported since (None: none waiting).
    unreported_since: float | None = None
    discovered: list[str] = field(default_factory=list)
    errors: int = 0
    backoff_until: datetime | None = None
    done: bool = False
    #: The address policy refused the host: its lease ends, nothing is held against it.
    refused: bool = False
    #: Sitemaps robots.txt lists on this host, to read before the pages (their lastmod dates
    #: are change notifications).
    sitemaps: deque[str] = field(default_factory=deque)
    #: The host's noise rules (:mod:`crawler.noise`): signatures leave their elements out.
    noise: NoiseRules = field(default_factory=NoiseRules)
    #: The host's noise check (a twin fetch) is due in this lease, and how many fetched pages
    #: were not HTML to check it on.
    noise_check: bool = False
    noise_tries: int = 0
    #: Guards the fields above while several lanes crawl the host (``max_per_host`` > 1).
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class CrawlWorker:
    """One worker thread's loop over leases."""

    def __init__(
        self,
        queue: WorkQueue,
        name: str,
        settings: CrawlSettings,
        *,
        stop: threading.Event,
        stats: CrawlStats,
        clock: Callable[[], datetime] = utcnow,
        known: KnownUrls | None = None,
        robots: RobotsCache | None = None,
        refused: dict[str, set[int]] | None = None,
    ) -> None:
        self.queue = queue
        self.name = name
        self.settings = settings
        self.stop = stop
        self.stats = stats
        self.clock = clock
        #: URLs known to be in the store (shared by a pool's workers): not offered again.
        self.known = known if known is not None else KnownUrls()
        #: robots.txt rules of the hosts the pool leased (shared): discovered URLs are
        #: screened with them.
        self.robots = robots if robots is not None else RobotsCache()
        #: Origins the address policy refused, with their refused pages (shared by a pool's
        #: workers): each origin said once, each page counted once.
        self.refused_origins = refused if refused is not None else {}
        self._deadline: float | None = None
        self._until_idle = False
        damping = settings.opic_damping
        self.cash_split: CashSplit = lambda cash, degree: crawl_cash_split(cash, degree, damping)

    def run(self, *, until_idle: bool = False, deadline: float | None = None) -> None:
        """Lease and crawl until stopped, past ``deadline`` (monotonic), or, with
        ``until_idle``, until nothing is due or leased anywhere (or all this worker can
        lease is refused by the address policy). The deadline also ends the hosts being
        crawled, between two requests.

        Hosts are crawled on a rolling basis (:class:`_InFlight`): up to
        ``settings.hosts_in_flight`` at once, each in its own thread, and the worker leases
        again as soon as a host is done, not once a whole lease batch is."""
        self._deadline = deadline
        self._until_idle = until_idle
        idle = self.settings.idle_sleep
        wait = idle
        flight = _InFlight(self)
        try:
            while not self._stopping():
                try:
                    flight.collect()
                    if until_idle and flight.all_refused and not flight.running():
                        return  # all that is left for us is refused: idle as far as we go
                    if flight.running() >= self.settings.hosts_in_flight:
                        flight.wait(idle)
                        continue
                    leases = self.queue.lease(self.name, max_urls=self.settings.max_urls)
                    if not leases:
                        if flight.running():
                            flight.wait(wait)  # a host done ends the wait: lease again
                        else:
                            if until_idle and self._idle():
                                return
                            self.stop.wait(wait)
                        wait = min(2 * wait, IDLE_BACKOFF * idle)
                        continue
                    wait = idle
                    flight.submit(leases)
                except StoreError as error:
                    # The store or the worker API refused or failed a call: what the batch did
                    # not report is fetched again once its leases expire. Keep crawling.
                    log.warning("%s: %s", self.name, error)
                    self.stats.add(queue_errors=1)
                    self.stop.wait(max(idle, 1.0))
                except Exception:  # last resort: a worker thread must not die silently
                    log.exception("%s: a batch of leases failed", self.name)
                    self.stats.add(worker_errors=1)
                    self.stop.wait(max(idle, 1.0))
        finally:
            flight.close()

    def _idle(self) -> bool:
        return not self.queue.work_remaining()

    def _stopping(self) -> bool:
        """Whether the stop event is set or the deadline has passed."""
        return self.stop.is_set() or (
            self._deadline is not None and time.monotonic() >= self._deadline
        )

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` (less if the deadline comes first); whether to stop now."""
        if self._deadline is not None:
            seconds = min(seconds, self._deadline - time.monotonic())
        if seconds > 0:
            self.stop.wait(seconds)
        return self._stopping()

    # -- a batch of leases -------------------------------------------------------------------
    def crawl_batch(self, leases: list[Lease]) -> int:
        """Crawl several hosts at once, each in a thread of its own at its own polite pace.

        A host's thread sleeps through the delay its host asks for while the others fetch,
        and a slow host holds up only its own thread. Each host gets its own HTTP session, so
        connections are reused per host. A host is reported and handed back as soon as its
        pages are done; on stop, what was fetched is reported and the rest given back.
        Returns how many of the hosts the address policy refused.
        """
        self.stats.add(leases=len(leases), active_hosts=len(leases))
        heartbeat = _Heartbeat(self, leases)
        try:
            if len(leases) == 1:
                return int(self._crawl_host(leases[0], heartbeat))
            with ThreadPoolExecutor(len(leases), thread_name_prefix=f"{self.name}-host") as pool:
                return sum(pool.map(lambda lease: self._crawl_host(lease, heartbeat), leases))
        finally:
            heartbeat.stop()

    def _crawl_host(self, lease: Lease, heartbeat: _Heartbeat | None = None) -> bool:
        """Crawl one leased host; whether the address policy refused it.

        Its robots.txt and sitemaps come first, one request at a time; then its pages, in up
        to ``politeness.max_per_host`` lanes (threads with a connection each), each lane
        waiting the host's delay after its own request; in one lane when its robots.txt asks
        for a Crawl-delay."""
        s = self.settings
        fetchers = [Fetcher(s.limits, user_agent=s.user_agent, clock=self.clock)]
        crawl = self._start(lease)
        try:
            self._crawl_lane(crawl, fetchers[0], setup=True)
            # a host that asks for a Crawl-delay gets one request per delay, whatever N
            asked = crawl.rules is not None and bool(crawl.rules.crawl_delay(s.agent))
            lanes = 1 if asked else min(s.politeness.max_per_host, len(crawl.pending))
            if lanes <= 1 or crawl.done:
                self._crawl_lane(crawl, fetchers[0])
            else:
                fetchers += [
                    Fetcher(s.limits, user_agent=s.user_agent, clock=self.clock)
                    for _ in range(lanes - 1)
                ]
                name = f"{self.name}-lane"
                with ThreadPoolExecutor(lanes - 1, thread_name_prefix=name) as pool:
                    others = [pool.submit(self._crawl_lane, crawl, f) for f in fetchers[1:]]
                    self._crawl_lane(crawl, fetchers[0])
                    for lane in others:
                        lane.result()
        finally:
            for fetcher in fetchers:
                fetcher.close()
            if heartbeat is not None:
                heartbeat.forget(lease.lease_id)
            self._finish(crawl)
            self.stats.add(active_hosts=-1)
        return crawl.refused

    def _crawl_lane(self, crawl: _HostCrawl, fetcher: Fetcher, *, setup: bool = False) -> None:
        """Send one lane's requests to the host until its crawl is done or the worker stops;
        with ``setup``, only until its robots.txt and sitemaps are read and its noise checked
        (so that every lane signs pages under the same rules). A store failure ends
        the host's crawl for every lane and is raised."""
        next_request = crawl.next_request
        try:
            while not crawl.done and not self._stopping():
                if (
                    setup
                    and crawl.rules is not None
                    and not crawl.sitemaps
                    and not crawl.noise_check
                ):
                    return
                wait = next_request - time.monotonic()
                if wait > 0 and self._pause(wait):
                    break
                next_request = self._step(crawl, fetcher)
        except BaseException:
            crawl.done = True
            raise

    def _start(self, lease: Lease) -> _HostCrawl:
        self.known.remember(page.url for page in lease.pages)
        now = time.monotonic()
        rules = self._stored_rules(lease)
        if rules is not None:
            self.robots.put(lease.origin, rules)
        checked = lease.noise_checked_at
        try:
            noise = NoiseRules.from_text(lease.noise_rules)
        except ValueError as error:  # not written by a crawler of ours: learn them again
            log.warning("%s: stored noise rules ignored: %s", lease.origin, error)
            noise, checked = NoiseRules(), None
        return _HostCrawl(
            lease=lease,
            rules=rules,
            pending=deque(lease.pages),
            next_request=now,
            noise=noise,
            noise_check=self.settings.noise_twins > 0
            and (checked is None or self.clock() - checked >= NOISE_RECHECK),
        )

    def _stored_rules(self, lease: Lease) -> RobotsRules | None:
        if lease.robots_fetched_at is None or lease.robots_expires_at is None:
            return None
        status = lease.robots_status if lease.robots_status != 599 else None
        rules = RobotsRules.restore(
            status, lease.robots_txt, lease.robots_fetched_at, lease.robots_expires_at
        )
        return None if rules.expired(self.clock()) else rules

    def _step(self, crawl: _HostCrawl, fetcher: Fetcher) -> float:
        """One request to the host: its robots.txt when needed, else a sitemap, else its next
        page that robots.txt allows. Returns the monotonic time before which this lane sends
        nothing more to the host. A step that raises something unforeseen is not fatal: the
        page gets an error and the host's crawl ends (:meth:`_failed_step`)."""
        page: LeasedPage | None = None
        try:
            if crawl.rules is None:
                self._fetch_robots(crawl, fetcher)
                return crawl.next_request
            if crawl.sitemaps:
                self._read_sitemap(crawl, fetcher, crawl.sitemaps.popleft())
                return crawl.next_request
            with crawl.lock:
                # another lane may have ended the host's crawl (a 429, an error) meanwhile
                page = None if crawl.done else self._next_allowed(crawl, crawl.rules)
                if page is None:
                    crawl.done = True
                    return crawl.next_request
            return self._fetch_page(crawl, fetcher, crawl.rules, page)
        except StoreError:
            raise
        except Exception as error:  # a bug or an answer nobody foresaw: not fatal
            self._failed_step(crawl, error, page)
            return crawl.next_request

    def _fetch_robots(self, crawl: _HostCrawl, fetcher: Fetcher) -> None:
        """Fetch the host's robots.txt, record it on the host, and pace the next request."""
        s = self.settings
        # RFC 9309 sec. 2.3.1.2: follow at least five redirects, even to other hosts.
        outcome = fetcher.fetch(robots_url(crawl.lease.origin), max_redirects=5, any_origin=True)
        if outcome.refused:
            self._refused(crawl, outcome)
            return
        # A robots.txt cut short (or otherwise unreadable) is not "allow everything":
        # it counts as unreachable, as a network error does (RFC 9309 sec. 2.3.1.4). Still a
        # redirect after five hops (or a loop) is "unavailable", as a 4xx: no rules.
        redirected = outcome.status is not None and 300 <= outcome.status < 400
        status = outcome.status if outcome.error is None or redirected else None
        rules = RobotsRules.from_response(
            status, outcome.body, outcome.started_at, unreachable_retry=s.robots_retry
        )
        crawl.rules = rules
        self.robots.put(crawl.lease.origin, rules)
        failures = crawl.lease.robots_failures + 1 if rules.unreachable else 0
        give_up = 0 < s.robots_give_up_after <= failures
        crawl.host = replace(
            crawl.host,
            robots_txt=rules.body or "",
            robots_status=outcome.status if outcome.status is not None else 599,
            robots_fetched_at=rules.fetched_at,
            robots_expires_at=rules.expires_at,
            crawl_delay=rules.crawl_delay(s.agent) or 0.0,
            robots_failures=failures,
            given_up_at=rules.fetched_at if give_up else None,
        )
        if give_up:
            log.warning(
                "%s: robots.txt unreachable %d times in a row (%s): host given up; its pages "
                "are not crawled until a URL of it is seeded again",
                crawl.lease.origin,
                failures,
                outcome.error or f"HTTP {outcome.status}",
            )
            self.stats.add(given_up=1)
        delay = request_delay(s.politeness, rules.crawl_delay(s.agent), outcome.duration)
        crawl.next_request = time.monotonic() + delay
        if rules.unreachable:  # RFC 9309: assume complete disallow, ask again later
            crawl.backoff_until = rules.expires_at
            crawl.done = True
        elif s.sitemaps:
            crawl.sitemaps.extend(self._own_sitemaps(crawl.lease.origin, rules))

    def _next_allowed(self, crawl: _HostCrawl, rules: RobotsRules) -> LeasedPage | None:
        """The next leased page robots.txt allows; the disallowed ones before it are recorded
        as blocked. None when no page is left."""
        while crawl.pending:
            page = crawl.pending.popleft()
            if rules.allows(page.url, self.settings.agent):
                return page
            crawl.results.append(
                FetchResult(
                    page_id=page.page_id,
                    fetched_at=self.clock(),
                    status="blocked",
                    error="disallowed by robots.txt",
                    next_due_at=rules.expires_at,
                )
            )
            self.stats.add(blocked=1)
        return None

    def _fetch_page(
        self, crawl: _HostCrawl, fetcher: Fetcher, rules: RobotsRules, page: LeasedPage
    ) -> float:
        """Fetch one page, record what was seen, report when enough is pending, and pace
        (or end) the host's crawl. Returns the monotonic time before which this lane sends
        nothing more to the host. The fetch and its parsing run outside the host's lock (other
        lanes fetch meanwhile); what is recorded on the host, inside it."""
        s = self.settings
        outcome = fetcher.fetch(
            page.url,
            etag=page.etag,
            last_modified=page.last_modified if s.if_modified_since else None,
            allowed=lambda url: rules.allows(url, s.agent),
        )
        if outcome.refused:
            with crawl.lock:
                crawl.pending.appendleft(page)
                self._refused(crawl, outcome)
            return crawl.next_request
        if crawl.noise_check:
            self._check_noise(crawl, fetcher, rules, page, outcome)
        delay = request_delay(s.politeness, rules.crawl_delay(s.agent), outcome.duration)
        result, links = self.observe(page.page_id, page.signature, outcome, crawl.noise)
        links = self._in_scope(links, crawl.lease.origin)
        # OPIC cash goes to the pages the crawl can read: an unfetchable page would keep it
        outlinks = [u for u in links if not self._disallowed(u)]
        if outlinks:
            result = replace(result, outlinks=tuple(outlinks))
        with crawl.lock:
            crawl.discovered.extend(links)
            if result.status == "error":
                crawl.errors += 1
                retry = parse_retry_after(outcome.retry_after, self.clock(), s.politeness)
                delay = max(delay, retry or backoff_seconds(s.politeness, crawl.errors))
                result = replace(
                    result,
                    next_due_at=result.fetched_at + max(s.error_retry, timedelta(seconds=delay)),
                )
            crawl.results.append(result)
            now = time.monotonic()
            if crawl.unreported_since is None:
                crawl.unreported_since = now
            # bounds what a killed worker leaves unrecorded; the host's last page is reported
            # with the hand-back instead
            if crawl.pending and (
                len(crawl.results) >= s.report_every
                or now - crawl.unreported_since >= s.report_seconds
            ):
                self._report(crawl)
            next_request = time.monotonic() + delay
            crawl.next_request = max(crawl.next_request, next_request)
            if outcome.status in _BACK_OFF or crawl.errors >= s.max_errors_per_lease:
                self._back_off(crawl, delay)
            elif not crawl.pending:
                crawl.done = True
        return next_request

    def _back_off(self, crawl: _HostCrawl, seconds: float) -> None:
        """End the host's crawl, backed off ``seconds`` from now (never less than another
        lane's backoff already set). The caller holds the host's lock, or is its only lane."""
        until = self.clock() + timedelta(seconds=seconds)
        if crawl.backoff_until is None or until > crawl.backoff_until:
            crawl.backoff_until = until
        crawl.next_request = max(crawl.next_request, time.monotonic() + seconds)
        crawl.done = True

    def _check_noise(
        self,
        crawl: _HostCrawl,
        fetcher: Fetcher,
        rules: RobotsRules,
        page: LeasedPage,
        outcome: FetchOutcome,
    ) -> None:
        """The host's noise check (:mod:`crawler.noise`): when ``outcome`` is a whole HTML
        page, fetch it ``noise_twins`` times more (:data:`~crawler.noise.NOISE_TWINS` by
        default), each the host's delay
        after the last, and learn the host's noise rules from each version against the first,
        before the page is signed. Tried on the lease's first 3 pages at most; twin fetches
        that all fail leave the check for the next lease."""
        s = self.settings
        html = page_kind(outcome.content_type, s.limits.content_types) == "html"
        if outcome.status != 200 or outcome.truncated or not outcome.body or not html:
            crawl.noise_tries += 1
            crawl.noise_check = crawl.noise_tries < 3
            return
        crawl.noise_check = False
        learned: NoiseRules | None = None  # None until a twin compared with the first version
        checked_at = outcome.started_at
        last = outcome
        for _ in range(s.noise_twins):
            delay = request_delay(s.politeness, rules.crawl_delay(s.agent), last.duration)
            if self._pause(delay):
                break
            last = fetcher.fetch(page.url, allowed=lambda url: rules.allows(url, s.agent))
            self.stats.add(noise_checks=1)
            if last.status in _BACK_OFF:  # the twins tripped a rate limit: as any request
                retry = parse_retry_after(last.retry_after, self.clock(), s.politeness)
                self._back_off(crawl, max(delay, retry or backoff_seconds(s.politeness, 1)))
                break
            if last.status != 200 or last.truncated or last.refused or not last.body:
                break
            first, twin = (
                parse_html(outcome.body, outcome.encoding),
                parse_html(last.body, last.encoding),
            )
            pair = learn_noise(first, twin) if first is not None and twin is not None else None
            if pair is None:  # the page itself changed (or is unreadable): this pair says nothing
                continue
            learned = pair if learned is None else learned.merged(pair)
            checked_at = last.started_at
        if learned is None:
            return
        # a check on a page without some of the site's noise keeps what earlier checks taught
        learned = crawl.noise.merged(learned)
        if learned != crawl.noise:
            log.info(
                "%s: noise rules %s", crawl.lease.origin, ", ".join(learned.selectors) or "none"
            )
        if learned:
            self.stats.add(noise_found=1)
        crawl.noise = learned
        crawl.host = replace(crawl.host, noise_rules=learned.to_text(), noise_checked_at=checked_at)

    def _refused(self, crawl: _HostCrawl, outcome: FetchOutcome) -> None:
        """The address policy refused the host: say so once, count its pages, and hand it
        back unfetched, not backed off (the operator's policy is not the host's fault)."""
        origin = crawl.lease.origin
        pages = {page.page_id for page in crawl.pending}
        with self.stats.lock:
            first = origin not in self.refused_origins
            known = self.refused_origins.setdefault(origin, set())
            new = len(pages - known)
            known |= pages
        if first:
            log.warning(
                "%s: %s; its pages are not fetched (allow private addresses to crawl it: "
                "crawl --allow-private)",
                origin,
                outcome.error,
            )
        self.stats.add(refused=new)
        crawl.refused = True
        crawl.done = True
        # --until-idle: at once, so that every worker of the pool meets it, and stops, soon
        crawl.next_request = time.monotonic() + (0.0 if self._until_idle else REFUSED_RETRY)

    def _failed_step(self, crawl: _HostCrawl, error: Exception, page: LeasedPage | None) -> None:
        """A step raised: record an error on the page it was fetching (so that a page that
        trips the crawler is retried later, not at once and forever), back the host off,
        and end its lease; the worker and the other hosts go on."""
        log.exception("%s: crawling %s failed", self.name, crawl.lease.origin)
        now = self.clock()
        self.stats.add(errors=1, worker_errors=1)
        with crawl.lock:
            if page is not None:
                crawl.results.append(
                    FetchResult(
                        page_id=page.page_id,
                        fetched_at=now,
                        status="error",
                        error=f"crawler error: {type(error).__name__}: {error}"[:500],
                        next_due_at=now + self.settings.error_retry,
                    )
                )
            crawl.errors += 1
            self._back_off(crawl, self.settings.error_retry.total_seconds())

    def _own_sitemaps(self, origin: str, rules: RobotsRules) -> list[str]:
        """The sitemaps robots.txt lists on this very host (another host's are not ours to
        fetch under this lease), relative ones resolved, at most ``max_sitemaps``."""
        own = []
        for listed in rules.sitemaps():
            try:
                url = normalize_url(urljoin(origin + "/", listed.strip()))
            except InvalidURLError:
                continue
            if origin_of(url) == origin and url not in own:
                own.append(url)
        return own[: self.settings.max_sitemaps]

    def _read_sitemap(self, crawl: _HostCrawl, fetcher: Fetcher, url: str) -> None:
        """One request: a sitemap; its entries on this host with a lastmod become change
        notifications. A sitemap that fails or does not parse is skipped."""
        s = self.settings
        rules = crawl.rules
        outcome = fetcher.fetch(url, content_types=_SITEMAP_TYPES)
        crawl.next_request = time.monotonic() + request_delay(
            s.politeness, rules.crawl_delay(s.agent) if rules else None, outcome.duration
        )
        if outcome.status != 200 or not outcome.body or outcome.truncated:
            return
        try:
            entries = parse_sitemap(outcome.body)
        except SitemapError as error:
            log.info("%s: %s", url, error)
            return
        origin = crawl.lease.origin
        notes = []
        for entry in entries:
            if entry.lastmod is None:
                continue
            try:
                loc = normalize_url(entry.loc)
            except InvalidURLError:
                continue
            if origin_of(loc) == origin and (rules is None or rules.allows(loc, s.agent)):
                notes.append((loc, origin, entry.lastmod))
        if notes:
            self.stats.add(notified=self.queue.add_notifications(notes))

    def _report(self, crawl: _HostCrawl) -> None:
        """Record what the host's lease has seen so far: the new URLs and the observations,
        in one call (the URLs first, so that the report can move cash to them)."""
        unknown = self._unknown(crawl)
        candidates, blocked = self._screened(unknown)
        if crawl.results:
            outcome = self.queue.report(
                crawl.lease.lease_id,
                crawl.results,
                cash_split=self.cash_split,
                discovered=candidates,
                blocked=blocked,
            )
            self._remember(crawl, unknown, outcome.discovered, outcome.unfetchable)
            crawl.results = []
        elif unknown:
            added = self.queue.add_pages(candidates, blocked=blocked)
            self._remember(crawl, unknown, added, 0)
        crawl.unreported_since = None

    def _unknown(self, crawl: _HostCrawl) -> list[str]:
        """The URLs found that the pool does not know to be stored yet."""
        return self.known.unknown(crawl.discovered)

    def _in_scope(self, links: list[str], origin: str) -> list[str]:
        """The ``links`` found on a page of ``origin`` that the crawl scope follows."""
        kept = self.settings.scope.followed(links, origin)
        if len(kept) < len(links):
            self.stats.add(out_of_scope=len(links) - len(kept))
        return kept

    def _screened(
        self, urls: list[str]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str, datetime]]]:
        """``urls`` as new candidates ``(url, origin)``, and as unfetchable pages ``(url,
        origin, check again at)``: those their host's robots.txt disallows, as the pool
        last read it (URLs of hosts whose rules it has not read are candidates)."""
        agent = self.settings.agent
        candidates: list[tuple[str, str]] = []
        blocked: list[tuple[str, str, datetime]] = []
        for url in urls:
            origin = origin_of(url)
            rules = self.robots.disallows(url, origin, agent)
            if rules is None:
                candidates.append((url, origin))
            else:
                blocked.append((url, origin, rules.expires_at))
        return candidates, blocked

    def _disallowed(self, url: str) -> bool:
        """Whether the pool's robots.txt rules disallow ``url`` (see :meth:`_screened`)."""
        return self.robots.disallows(url, origin_of(url), self.settings.agent) is not None

    def _remember(self, crawl: _HostCrawl, urls: list[str], added: int, blocked: int) -> None:
        """The host's discovered ``urls`` are stored now (``added`` candidates and ``blocked``
        unfetchable pages were new); until then they stay on the host, to be offered again
        if the call failed."""
        crawl.discovered = []
        if urls:
            self.known.remember(urls)
            self.stats.add(discovered=added, unfetchable=blocked)

    def _finish(self, crawl: _HostCrawl) -> None:
        """Report the host's observations and new URLs, and hand the host back, in one call."""
        unknown = self._unknown(crawl)
        candidates, blocked = self._screened(unknown)
        wait_left = max(0.0, crawl.next_request - time.monotonic())
        host = replace(
            crawl.host,
            next_fetch_at=self.clock() + timedelta(seconds=wait_left),
            backoff_until=crawl.backoff_until,
            consecutive_errors=crawl.errors,
        )
        outcome, _returned = self.queue.finish(
            crawl.lease.lease_id,
            crawl.results,
            host,
            cash_split=self.cash_split,
            discovered=candidates,
            blocked=blocked,
        )
        self._remember(crawl, unknown, outcome.discovered, outcome.unfetchable)

    def observe(
        self,
        page_id: int,
        previous_signature: str | None,
        outcome: FetchOutcome,
        noise: NoiseRules | None = None,
    ) -> tuple[FetchResult, list[str]]:
        """The observation of one fetch, and the URLs it points to; an HTML page's signature
        leaves out the elements its host's ``noise`` rules name."""
        base: dict[str, Any] = {
            "page_id": page_id,
            "fetched_at": outcome.started_at,
            "http_status": outcome.status,
            "duration": outcome.duration,
            "etag": outcome.etag,
            "last_modified": outcome.last_modified,
        }
        status = outcome.status
        if outcome.error is not None and (status is None or status == 200):
            self.stats.add(errors=1)
            return FetchResult(status="error", error=outcome.error, **base), []
        if status == 304:
            self.stats.add(fetched=1, not_modified=1)
            return FetchResult(status="ok", changed=False, **base), []
        if outcome.redirect_to is not None or (status is not None and 300 <= status < 400):
            self.stats.add(fetched=1)
            targets = [outcome.redirect_to] if outcome.redirect_to else []
            signature = answer_signature(f"{status} {outcome.redirect_to or outcome.error}")
            changed = content_changed(previous_signature, signature)
            result = FetchResult(
                status="redirect",
                error=outcome.error,
                changed=changed,
                signature=signature,
                **base,
            )
            return result, targets
        if status in (404, 410):
            self.stats.add(fetched=1)
            signature = answer_signature(f"{status}")
            changed = content_changed(previous_signature, signature)
            return FetchResult(status="gone", changed=changed, signature=signature, **base), []
        if status != 200:
            self.stats.add(errors=1)
            return FetchResult(status="error", error=f"HTTP {status}", **base), []
        self.stats.add(fetched=1)
        error = f"truncated at {len(outcome.body):,} bytes" if outcome.truncated else None
        kind = page_kind(outcome.content_type, self.settings.limits.content_types)
        if kind is None:  # an asset (image, stylesheet, ...): its body was not read
            note = f"not a page ({outcome.content_type}): body not read"
            return FetchResult(status="ok", bytes=len(outcome.body), error=note, **base), []
        links: list[str] = []
        if kind == "html":  # the bytes, decoded by BOM, HTTP charset, then the page's own
            root = parse_html(outcome.body, outcome.encoding)
            links = extract_links(root, outcome.final_url) if root is not None else []
            text = main_text(root, noise) if root is not None else ""
            mark = noise.fingerprint if noise else ""
        else:
            text = document_text(outcome.body, outcome.content_type, outcome.encoding)
            mark = ""
        signature = page_signature(text, mark)
        changed = content_changed(previous_signature, signature)
        if changed:
            self.stats.add(changed=1)
        result = FetchResult(
            status="ok",
            changed=changed,
            signature=signature,
            bytes=len(outcome.body),
            error=error,
            **base,
        )
        return result, links


class _InFlight:
    """A worker's hosts being crawled, each in a thread of its own (:meth:`CrawlWorker.run`),
    their leases renewed by one heartbeat. Tells the loop how many run, waits for the next
    to finish, and counts what each lease batch's hosts did: ``all_refused`` is set when
    every host of a batch was refused by the address policy (all this worker can lease is
    refused: idle as far as ``until_idle`` goes). Errors of a host's crawl are logged and
    counted as a batch's were (``queue_errors``: the store or the API failed a call;
    ``worker_errors``: anything else)."""

    def __init__(self, worker: CrawlWorker) -> None:
        self.worker = worker
        self.pool = ThreadPoolExecutor(
            worker.settings.hosts_in_flight, thread_name_prefix=f"{worker.name}-host"
        )
        self.heartbeat = _Heartbeat(worker, [])
        self.futures: dict[Future[bool], int] = {}
        self.batches: dict[int, list[int]] = {}  # batch -> [hosts, hosts left, refused]
        self.done = threading.Condition()
        self.finished: list[Future[bool]] = []
        self.all_refused = False
        self._batch = 0

    def running(self) -> int:
        return len(self.futures)

    def submit(self, leases: list[Lease]) -> None:
        """Start crawling the hosts of one lease batch."""
        self._batch += 1
        self.batches[self._batch] = [len(leases), len(leases), 0]
        self.worker.stats.add(leases=len(leases), active_hosts=len(leases))
        self.heartbeat.add(leases)
        for lease in leases:
            future = self.pool.submit(self.worker._crawl_host, lease, self.heartbeat)
            self.futures[future] = self._batch
            future.add_done_callback(self._finished)

    def _finished(self, future: Future[bool]) -> None:
        with self.done:
            self.finished.append(future)
            self.done.notify_all()

    def wait(self, seconds: float) -> None:
        """Wait until a host is done (or ``seconds`` pass), then account for the hosts
        done."""
        with self.done:
            if not self.finished:
                self.done.wait(min(seconds, self.worker.settings.idle_sleep * IDLE_BACKOFF))
        self.collect()

    def collect(self) -> None:
        """Account for the hosts done since last asked (no wait)."""
        with self.done:
            finished, self.finished = self.finished, []
        for future in finished:
            batch = self.futures.pop(future, None)
            if batch is None:
                continue
            count = self.batches[batch]
            count[1] -= 1
            error = future.exception()
            if error is None:
                count[2] += int(future.result())
            elif isinstance(error, StoreError):
                log.warning("%s: %s", self.worker.name, error)
                self.worker.stats.add(queue_errors=1)
            else:
                log.error("%s: a host's crawl failed", self.worker.name, exc_info=error)
                self.worker.stats.add(worker_errors=1)
            if count[1] == 0:
                hosts, _, refused = self.batches.pop(batch)
                self.all_refused = refused == hosts

    def close(self) -> None:
        """Wait for every host (they stop between two requests once the worker stops),
        then stop the heartbeat."""
        self.pool.shutdown(wait=True)
        self.wait(0.0)
        self.heartbeat.stop()


class _Heartbeat:
    """Renews a batch's live leases every third of the lease time, in a thread of its own,
    while the worker lives: leases can be short (a killed worker's hosts come back within
    one lease time) and still outlast a slow host (a long Crawl-delay, a Retry-After, a
    fetch up to its deadline), which a renewal between two requests would not."""

    def __init__(self, worker: CrawlWorker, leases: list[Lease]) -> None:
        self.worker = worker
        self.live = {lease.lease_id for lease in leases}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.every = worker.queue.policy.lease_seconds / 3
        self.thread = threading.Thread(
            target=self._run, name=f"{worker.name}-heartbeat", daemon=True
        )
        self.thread.start()

    def add(self, leases: list[Lease]) -> None:
        """Renew these leases too."""
        with self.lock:
            self.live.update(lease.lease_id for lease in leases)

    def forget(self, lease_id: int) -> None:
        """The lease is being handed back: renew it no more."""
        with self.lock:
            self.live.discard(lease_id)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        while not self.done.wait(self.every):
            with self.lock:
                live = sorted(self.live)
            for lease_id in live:
                try:
                    if self.worker.queue.renew(lease_id) is None:
                        with self.lock:  # handed back since the list was read: no loss
                            lost = lease_id in self.live
                            self.live.discard(lease_id)
                        if lost:
                            log.warning(
                                "%s: lease %d expired before it was renewed",
                                self.worker.name,
                                lease_id,
                            )
                except Exception as error:  # the store or the API is away: try next beat
                    log.warning(
                        "%s: renewing lease %d failed: %s", self.worker.name, lease_id, error
                    )


def default_worker_prefix() -> str:
    """``{host name}-{process id}``: worker names unique per machine and process, so that an
    operator can tell which process holds a lease."""
    return f"{socket.gethostname()}-{os.getpid()}"


def run_workers(
    queue_factory: Callable[[], WorkQueue],
    settings: CrawlSettings,
    *,
    workers: int = 4,
    until_idle: bool = False,
    seconds: float | None = None,
    stop: threading.Event | None = None,
    stats: CrawlStats | None = None,
    name_prefix: str | None = None,
    worker_type: type[CrawlWorker] | None = None,
) -> CrawlStats:
    """Run ``workers`` worker threads, each with a queue of its own, until stopped, idle
    (``until_idle``) or ``seconds``; worker names are ``{name_prefix}-{number}``, the
    prefix by default ``{host name}-{process id}`` (:func:`default_worker_prefix`).
    ``worker_type``: a subclass of :class:`CrawlWorker` to run instead (a test's seam)."""
    stop = stop or threading.Event()
    stats = stats or CrawlStats()
    deadline = time.monotonic() + seconds if seconds is not None else None
    threads = []
    known = KnownUrls()
    robots = RobotsCache()
    refused: dict[str, set[int]] = {}
    prefix = name_prefix or default_worker_prefix()
    for number in range(workers):
        worker = (worker_type or CrawlWorker)(
            queue_factory(),
            f"{prefix}-{number}",
            settings,
            stop=stop,
            stats=stats,
            known=known,
            robots=robots,
            refused=refused,
        )
        thread = threading.Thread(
            target=worker.run,
            kwargs={"until_idle": until_idle, "deadline": deadline},
            name=f"crawl-{number}",
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return stats


def run_crawl(
    db: Database,
    queue_factory: Callable[[], WorkQueue],
    settings: CrawlSettings,
    *,
    workers: int = 4,
    until_idle: bool = False,
    seconds: float | None = None,
    stop: threading.Event | None = None,
    stats: CrawlStats | None = None,
    worker_type: type[CrawlWorker] | None = None,
) -> CrawlStats:
    """:func:`run_workers` on the store ``db``.

    Before and after, the virtual page's OPIC cash goes to every page and every page's
    importance is stored (O(pages), once each).
    """
    spread_virtual_cash(db, crawl_virtual_gift)
    try:
        return run_workers(
            queue_factory,
            settings,
            workers=workers,
            until_idle=until_idle,
            seconds=seconds,
            stop=stop,
            stats=stats,
            worker_type=worker_type,
        )
    finally:
        spread_virtual_cash(db, crawl_virtual_gift)

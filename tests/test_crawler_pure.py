"""The crawler's pure parts: politeness arithmetic, robots.txt rules, signatures, links."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.known_urls import KnownUrls
from crawler.links import extract_links
from crawler.politeness import (
    PolitenessPolicy,
    backoff_seconds,
    parse_retry_after,
    request_delay,
)
from crawler.robots import ROBOTS_TTL, RobotsRules, robots_url
from crawler.signature import (
    answer_signature,
    content_changed,
    hamming,
    page_signature,
    simhash,
    visible_text,
)
from crawler.worker import IDLE_BACKOFF, CrawlSettings, CrawlStats, CrawlWorker

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POLICY = PolitenessPolicy(min_delay=1.0, max_delay=60.0, duration_factor=5.0)


# -- politeness -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("crawl_delay", "duration", "expected"),
    [
        (None, None, 1.0),
        (10.0, None, 10.0),
        (3600.0, None, 60.0),  # clamped
        (0.0, None, 1.0),
        (None, 0.5, 2.5),  # 5 x response time
        (2.0, 4.0, 20.0),
        (None, 100.0, 60.0),
    ],
)
def test_request_delay(crawl_delay: float | None, duration: float | None, expected: float) -> None:
    assert request_delay(POLICY, crawl_delay, duration) == expected


@given(k=st.integers(1, 60), seed=st.integers(0, 2**32 - 1))
def test_backoff_is_bounded_and_jittered(k: int, seed: int) -> None:
    delay = backoff_seconds(POLICY, k, random.Random(seed))
    ceiling = min(POLICY.backoff_cap, POLICY.backoff_base * 2 ** (k - 1))
    assert POLICY.min_delay <= delay <= max(POLICY.min_delay, ceiling)


def test_backoff_grows_on_average() -> None:
    rng = random.Random(7)
    means = [sum(backoff_seconds(POLICY, k, rng) for _ in range(400)) / 400 for k in (1, 4, 8)]
    assert means[0] < means[1] < means[2]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("Sun, 01 Mar 2026 12:01:00 GMT", 60.0),
        ("Sun, 01 Mar 2026 11:00:00 GMT", 0.0),  # in the past
        ("99999999", 86_400.0),  # clamped
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


# -- robots.txt -----------------------------------------------------------------------------
ROBOTS = """
User-agent: *
Disallow: /private/
Crawl-delay: 4

User-agent: crawlplan
Disallow: /drafts/
Allow: /drafts/public
Sitemap: http://a.test/sitemap.xml
"""


def test_robots_2xx_rules_apply_to_the_matching_group() -> None:
    rules = RobotsRules.from_response(200, ROBOTS, NOW)
    assert rules.allows("http://a.test/private/x", "crawlplan")  # its own group has no rule
    assert not rules.allows("http://a.test/drafts/x", "crawlplan")
    assert rules.allows("http://a.test/drafts/public", "crawlplan")
    assert not rules.allows("http://a.test/private/x", "otherbot")
    assert rules.crawl_delay("otherbot") == 4.0 and rules.crawl_delay("crawlplan") is None
    assert rules.sitemaps() == ["http://a.test/sitemap.xml"]
    assert rules.expires_at == NOW + ROBOTS_TTL and not rules.expired(NOW)


@pytest.mark.parametrize("status", [401, 403, 404, 410])
def test_robots_4xx_allows_everything(status: int) -> None:
    rules = RobotsRules.from_response(status, "Disallow: /", NOW)
    assert rules.allows("http://a.test/anything", "crawlplan") and not rules.unreachable


@pytest.mark.parametrize("status", [500, 503, None])
def test_robots_unreachable_disallows_for_now(status: int | None) -> None:
    rules = RobotsRules.from_response(status, None, NOW)
    assert rules.unreachable and not rules.allows("http://a.test/", "crawlplan")
    assert rules.expires_at < NOW + ROBOTS_TTL  # asked again soon


def test_robots_url() -> None:
    assert robots_url("http://a.test:8080") == "http://a.test:8080/robots.txt"


# -- signatures ------------------------------------------------------------------------------
ARTICLE = (
    "The city council met on Tuesday to discuss the new budget for public transport. "
    "Several members argued that the bus network needs more frequent service in the evening, "
    "while others wanted to invest in cycling lanes along the river. The mayor proposed a "
    "compromise that would extend night buses on weekends and build two protected lanes "
    "before the summer. Residents who attended the meeting asked about fares, accessibility "
    "for wheelchair users and the timetable for construction work near the central station. "
    "A final vote is expected next month after the finance committee reviews the costs."
)


def _page(body: str, stamp: str = "2026-03-01 12:00:00", visits: int = 1) -> str:
    return (
        f"<html><head><title>T</title><style>p{{color:red}}</style>"
        f"<script>var t = '{stamp}';</script></head><body><!-- {stamp} -->"
        f"<p>{body}</p><footer>Generated {stamp}; {visits} visits</footer></body></html>"
    )


def test_visible_text_drops_markup_scripts_and_comments() -> None:
    text = visible_text(_page("hello <b>world</b>"))
    assert "hello world" in text and "color" not in text and "var t" not in text
    assert visible_text(b"") == "" and visible_text("not html at all") == "not html at all"


def test_trivial_edits_are_not_changes_and_real_edits_are() -> None:
    base = page_signature(visible_text(_page(ARTICLE)))
    trivial = page_signature(visible_text(_page(ARTICLE, stamp="2026-03-02 08:13:59", visits=7)))
    assert content_changed(base, trivial) is False
    edited = ARTICLE.replace("Tuesday", "Friday").replace("two protected", "four painted")
    update = " Update: the finance committee rejected the plan and asked for a new proposal."
    real = page_signature(visible_text(_page(edited + update)))
    assert content_changed(base, real) is True
    assert content_changed(None, real) is None
    assert content_changed("abc", real) is None


def test_any_difference_of_the_exact_hash_is_a_change_unless_a_threshold_is_asked() -> None:
    sim, exact, words = 0x0F0F_0F0F_0F0F_0F0F, 0x1234, 0x100
    prev = f"{sim:016x}{exact:016x}{words:08x}"
    assert content_changed(prev, f"{sim ^ 0b1:016x}{exact + 1:016x}{words:08x}") is True  # 1 bit
    near = f"{sim ^ 0b111:016x}{exact + 1:016x}{words:08x}"
    assert content_changed(prev, near, threshold=3) is False  # the opt-in near-duplicate test
    assert content_changed(prev, near, threshold=2) is True
    assert content_changed(prev, f"{~sim & (2**64 - 1):016x}{exact:016x}{words:08x}") is False
    assert content_changed(f"{sim:016x}{exact:016x}", prev) is None  # an older signature form


@pytest.mark.parametrize(
    ("text", "signature"),
    [
        ("", "0000000000000000e4a6a0577479b2b400000000"),
        ("Hello world", "e414e2f45586b29e878633aa32a3b15000000002"),
        (
            "Served Nov 25 at 14:02 to visitor 1234, request a1b2c3d4e5f6a7b8",
            "392dc42be7abdcdf04bd7c3b288cf0730000000b",
        ),
        (
            "PostgreSQL 15.2 Documentation: Chapter 11. Indexes. An index is a structure "
            "that speeds up reads.",
            "484f021e2083e0519e9106c2e3c6a39600000010",
        ),
    ],
)
def test_signatures_stay_what_the_store_holds(text: str, signature: str) -> None:
    """Pinned values: every stored page's next fetch is compared with a signature an older
    crawlplan made. A change of normalization or hashing that moves these would count every
    page as changed once; such a change must come with a new signature form (another
    length, which is compared with nothing) instead."""
    assert page_signature(text) == signature


def test_simhash_basics() -> None:
    assert simhash("") == 0
    assert simhash("same text here") == simhash("same  text\nhere")
    assert hamming(0b1011, 0b0001) == 2
    assert 0 <= simhash(ARTICLE) < 2**64


# -- links -----------------------------------------------------------------------------------
def test_links_are_resolved_normalized_and_filtered() -> None:
    html = """<html><head><base href="/docs/"></head><body>
      <a href="a.html">a</a> <a href="a.html#part">again</a> <a href="#top">self</a>
      <a href="HTTP://Other.test:80/x?b=2&a=1">x</a> <a href="mailto:me@a.test">mail</a>
      <a href="javascript:void(0)">js</a> <a href="/ads" rel="sponsored nofollow">ad</a>
      <area href="../map.html"> <a href="http://bad host/">bad</a> <a>no href</a>
    </body></html>"""
    assert extract_links(html, "http://a.test/index.html") == [
        "http://a.test/docs/a.html",
        "http://other.test/x?a=1&b=2",
        "http://a.test/map.html",
    ]


def test_meta_robots_nofollow_and_broken_html() -> None:
    html = '<html><head><meta name="robots" content="noindex, nofollow"></head>'
    assert extract_links(html + '<a href="/x">x</a>', "http://a.test/") == []
    assert extract_links("<a href='/x'>unclosed <div><p>", "http://a.test/") == ["http://a.test/x"]
    assert extract_links(b"", "http://a.test/") == []


def test_retry_after_uses_now() -> None:
    later = NOW + timedelta(seconds=30)
    assert parse_retry_after("Sun, 01 Mar 2026 12:01:00 GMT", later) == 30.0


def _reference_simhash(text: str) -> int:
    """SimHash as its definition reads: per bit, a majority vote of the shingle hashes."""
    from crawler.signature import _shingle_hashes, signature_words

    words = signature_words(text)
    if not words:
        return 0
    hashes = [int(h) for h in _shingle_hashes(words, 3)]
    return sum(
        1 << bit for bit in range(64) if 2 * sum((h >> bit) & 1 for h in hashes) > len(hashes)
    )


@given(st.lists(st.sampled_from(["web", "page", "crawl", "x7", "news", "a"]), max_size=60))
def test_simhash_is_the_bitwise_majority_of_shingle_hashes(words: list[str]) -> None:
    text = " ".join(words)
    assert simhash(text) == _reference_simhash(text)
    assert page_signature(text)[:16] == f"{simhash(text):016x}"


def test_known_urls_are_bounded_and_remembered_only_when_told() -> None:
    known = KnownUrls(capacity=3)
    assert known.unknown(["a", "b", "a"]) == ["a", "b"]
    assert known.unknown(["a"]) == ["a"]  # offering does not remember; storing does
    known.remember(["a", "b", "c"])
    assert known.unknown(["a", "b", "c", "d"]) == ["d"]
    known.remember(["a", "d"])  # "a" is refreshed, so "b" is now the oldest and goes
    assert len(known) == 3
    assert known.unknown(["a", "b", "c", "d"]) == ["b"]
    with pytest.raises(ValueError, match="capacity"):
        KnownUrls(capacity=0)


def test_an_answer_without_a_page_is_compared_exactly() -> None:
    # a redirect keeping its target is no change; another target, or a page instead, is one
    moved = answer_signature("301 https://example.org/a/1")
    assert content_changed(moved, answer_signature("301 https://example.org/a/1")) is False
    assert content_changed(moved, answer_signature("301 https://example.org/a/2")) is True
    assert content_changed(moved, page_signature("the page is back")) is True
    assert content_changed(None, moved) is None


# -- the worker's idle wait ------------------------------------------------------------------
class _Waits(threading.Event):
    """A stop event that records each wait and returns at once, set after ``limit`` waits."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self.limit:
            self.set()
        return self.is_set()


class _EmptyThenWork:
    """A queue with nothing to lease except on the calls in ``work_on`` (counted from 1)."""

    policy = SimpleNamespace(lease_seconds=60.0)

    def __init__(self, work_on: set[int]) -> None:
        self.work_on = work_on
        self.calls = 0

    def lease(self, worker: str, *, max_urls: int) -> list[object]:
        self.calls += 1
        return [SimpleNamespace(lease_id=self.calls)] if self.calls in self.work_on else []


def test_an_idle_worker_backs_off_and_waits_short_again_once_it_leases_work() -> None:
    crawled = threading.Event()

    class Worker(CrawlWorker):
        def _crawl_host(self, lease: Any, heartbeat: Any = None) -> bool:
            crawled.set()
            return False

    stop = _Waits(limit=9)
    queue = _EmptyThenWork(work_on={6})
    settings = CrawlSettings(idle_sleep=0.2)
    Worker(queue, "w", settings, stop=stop, stats=CrawlStats()).run()  # type: ignore[arg-type]
    # doubling from idle_sleep to IDLE_BACKOFF x idle_sleep, then from idle_sleep again (the
    # first wait after the lease may be the host's, not the stop event's)
    top = IDLE_BACKOFF * 0.2
    assert crawled.is_set()
    assert stop.waits[:5] == pytest.approx([0.2, 0.4, 0.8, top, top])
    assert stop.waits[5] == pytest.approx(0.2) or stop.waits[5] == pytest.approx(0.4)
    assert stop.waits[-1] == pytest.approx(top)


def test_heartbeat_warns_of_an_expired_lease_not_of_one_handed_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lease handed back while the heartbeat renews (renewal then finds no lease) is no
    loss and says nothing; a lease that expired while still live is reported."""
    import logging

    from crawler.worker import _Heartbeat

    beat: list[_Heartbeat] = []
    tried: list[int] = []

    def renew(lease_id: int) -> object | None:
        if lease_id == 1:
            if not beat:  # (the heartbeat beat before the test held it): renewed
                return object()
            beat[0].forget(1)  # handed back during the renewal round
        tried.append(lease_id)
        return None

    queue = SimpleNamespace(policy=SimpleNamespace(lease_seconds=0.06), renew=renew)
    worker = SimpleNamespace(name="w", queue=queue)
    leases = [SimpleNamespace(lease_id=1), SimpleNamespace(lease_id=2)]
    with caplog.at_level(logging.WARNING, logger="crawler.worker"):
        beat.append(_Heartbeat(worker, leases))  # type: ignore[arg-type]
        deadline = time.monotonic() + 5.0
        while not {1, 2} <= set(tried) and time.monotonic() < deadline:
            time.sleep(0.01)
        beat[0].stop()
    said = [r.getMessage() for r in caplog.records]
    assert said == ["w: lease 2 expired before it was renewed"], said
    assert beat[0].live == set()

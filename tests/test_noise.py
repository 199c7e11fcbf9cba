"""Noise rules learned per site from twin fetches (``crawler.noise``).

Pure tests: what :func:`learn_noise` learns from two versions of a page, and what it
refuses to learn (content, unnamed elements, generated names, pages that really changed);
how rules are stored, matched and marked in signatures. Then a crawl over real HTTP on
loopback, on both store backends: a site whose pages carry a teaser picked at random per
request is counted as changed on nearly every fetch without rules, never with the rules its
first lease learned; a real edit is still a change; the check runs again only when it is
older than ``NOISE_RECHECK``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler

import pytest
from pydantic import ValidationError
from sqlalchemy import select, update
from typer.testing import CliRunner

from crawler.fetch import FetchLimits
from crawler.links import parse_html
from crawler.noise import MAX_RULE_SHARE, NOISE_RECHECK, NOISE_TWINS, NoiseRules, learn_noise
from crawler.politeness import PolitenessPolicy
from crawler.remote import RemoteWorkQueue
from crawler.signature import (
    SIGNATURE_LENGTH,
    change_size,
    content_changed,
    main_text,
    page_signature,
)
from crawler.worker import CrawlSettings, CrawlStats, run_crawl, run_workers
from service.api.app import ApiSettings
from service.api.schemas import HostUpdateIn
from service.cli.app import app
from service.config import load_settings
from store import Database, LeasePolicy, LeaseQueue, add_pages, read_status, recompute_ready
from store.models import HOSTS, OBSERVATIONS, PAGES
from store.types import utcnow
from tests.api_server import TOKEN, ApiServer
from tests.loopback import LoopbackHost, respond

CONTENT = " ".join(f"word{i % 97} index table row" for i in range(60))
QUOTES = (
    "Brevity is the soul of wit",
    "Less is more",
    "Simplicity is the ultimate sophistication",
    "Well begun is half done",
    "Measure twice and cut once",
    "Fortune favours the bold",
)


def _page(teaser: str, content: str = CONTENT, greeting: str = "friendly") -> str:
    return (
        "<html><body><header>The site</header><div class='content'><h1>Title</h1>"
        f"<p>{content}</p><div class='teaser box' id='t-93812'>{teaser}</div>"
        f"<p>Hello <b>dear</b> {greeting} reader</p></div>"
        "<footer>About us</footer></body></html>"
    )


def _learn(a: str, b: str) -> NoiseRules | None:
    first, second = parse_html(a), parse_html(b)
    assert first is not None and second is not None
    return learn_noise(first, second)


# -- learning ------------------------------------------------------------------------------


def test_a_rotating_teaser_is_learned_by_its_class_not_its_generated_id() -> None:
    rules = _learn(_page(QUOTES[0]), _page(QUOTES[1]))
    assert rules == NoiseRules(("div.box.teaser",))  # id t-93812 looks generated


def test_the_same_page_twice_teaches_nothing() -> None:
    rules = _learn(_page(QUOTES[0]), _page(QUOTES[0]))
    assert rules == NoiseRules() and not rules


def test_noise_the_signature_masks_already_is_not_a_rule() -> None:
    """Digits, dates and generated tokens are masked everywhere (crawler.signature)."""
    rules = _learn(_page("Visitor 1234 at 14:02 on Nov 25"), _page("Visitor 87 at 9:41 on Dec 3"))
    assert rules == NoiseRules()


def test_noise_in_an_unnamed_element_is_left_alone() -> None:
    """The greeting's <p> has no name; its nearest named ancestor is the content itself,
    which holds more than MAX_RULE_SHARE of the words: no rule hides it."""
    rules = _learn(_page(QUOTES[0], greeting="friendly"), _page(QUOTES[0], greeting="curious"))
    assert rules == NoiseRules()


def test_a_rule_that_would_cover_the_content_is_refused() -> None:
    """The two versions differ in a few words of a named element that holds half the page."""
    a = f"<html><body><div class='story'>Intro one<p>{CONTENT}</p></div><p>{CONTENT}</p>"
    b = a.replace("Intro one", "Intro two")
    assert _learn(a, b) == NoiseRules()
    assert MAX_RULE_SHARE < 0.5


def test_a_page_that_really_changed_teaches_nothing() -> None:
    rules = _learn(_page(QUOTES[0], content=CONTENT), _page(QUOTES[1], content="A new story."))
    assert rules is None


def test_a_block_shown_on_some_requests_does_not_shift_its_siblings_into_rules() -> None:
    """An announcement present in one version only: aligned as sequences, the sections after
    it are the same text, not 'changed' because their positions moved."""
    sections = "".join(
        f"<section id='part{name}'><h2>{name}</h2><p>{CONTENT[:150]} {name}</p></section>"
        for name in ("intro", "examples", "changes", "notes", "usage", "limits", "faq", "more")
    )
    banner = "<section class='announce'><p>Maintenance tonight</p></section>"
    a = f"<html><body>{sections}</body></html>"
    b = f"<html><body>{banner}{sections}</body></html>"
    assert _learn(a, b) == NoiseRules(("section.announce",))


def test_a_rule_never_hides_another_pages_content() -> None:
    """Learned where div.container held a rotating testimonial, the rule meets a page whose
    text sits in div.container: past MAX_RULE_SHARE of its words it is not applied there,
    and an edit of that page is a change."""
    rules = NoiseRules(("div.container",))
    article = (
        f"<html><body><h1>News</h1><div class='container'><p>{CONTENT}</p></div></body></html>"
    )
    edited = article.replace("</p>", " A paragraph added.</p>")
    before, after = (main_text(parse_html(page), rules) for page in (article, edited))
    assert CONTENT[:100] in before
    mark = rules.fingerprint
    assert content_changed(page_signature(before, mark), page_signature(after, mark)) is True
    # where it holds little, it is cut
    home = f"<html><body><p>{CONTENT}</p><div class='container'>Best shop ever</div></body></html>"
    assert "Best shop" not in main_text(parse_html(home), rules)


def test_change_size_reads_marked_signatures() -> None:
    mark = NoiseRules(("div.teaser",)).fingerprint
    old, new = page_signature("one two three", mark), page_signature("one two three four", mark)
    size = change_size(old, new)
    assert size is not None and size.words == 1 and size.bits > 0


def test_an_id_names_an_element_without_classes() -> None:
    a = f"<html><body><p>{CONTENT}</p><span id='greeting'>Good morning</span></body></html>"
    b = a.replace("Good morning", "Welcome back")
    assert _learn(a, b) == NoiseRules(("span#greeting",))


# -- rules, signatures ---------------------------------------------------------------------


def test_rules_are_stored_sorted_once_and_read_back() -> None:
    rules = NoiseRules.from_text("p#x\ndiv.quote\n\np#x")
    assert rules.selectors == ("div.quote", "p#x")
    assert NoiseRules.from_text(rules.to_text()) == rules
    assert NoiseRules.from_text(None) == NoiseRules.from_text("") == NoiseRules()
    assert len(rules.fingerprint) == 8 and NoiseRules().fingerprint == ""
    assert rules.fingerprint != NoiseRules(("div.quote",)).fingerprint


@pytest.mark.parametrize("bad", ["div quote", "DIV.x", ".x", "div", "div#a#b", "div.a b"])
def test_malformed_rules_are_refused_with_their_form(bad: str) -> None:
    with pytest.raises(ValueError, match=r"tag#id or tag\.class"):
        NoiseRules.from_text(bad)
    with pytest.raises(ValidationError, match="noise rule"):
        HostUpdateIn(noise_rules=bad)
    assert HostUpdateIn(noise_rules="div.quote\np#x").noise_rules == "div.quote\np#x"


def test_an_element_matches_by_its_id_or_all_the_named_classes() -> None:
    root = parse_html(
        "<html><body><div class='teaser box wide'>a</div><div class='teaser'>b</div>"
        "<p id='x'>c</p><span id='x'>d</span></body></html>"
    )
    assert root is not None
    rules = NoiseRules(("div.box.teaser", "p#x"))
    matched = [e.text for e in root.iter() if rules.matches(e)]
    assert matched == ["a", "c"]


def test_signatures_leave_noise_out_and_carry_the_rules_mark() -> None:
    rules = NoiseRules(("div.box.teaser",))
    texts = [main_text(parse_html(_page(q)), rules) for q in QUOTES[:3]]
    assert len(set(texts)) == 1 and "Title" in texts[0] and "Brevity" not in texts[0]
    marked = page_signature(texts[0], rules.fingerprint)
    assert len(marked) == SIGNATURE_LENGTH + 8 and marked.endswith(rules.fingerprint)
    plain = page_signature(main_text(parse_html(_page(QUOTES[0]))))
    assert len(plain) == SIGNATURE_LENGTH
    # a signature read under other rules (or none) is not compared: unknown, not a change
    assert content_changed(plain, marked) is None and change_size(plain, marked) is None
    other = page_signature(texts[0], NoiseRules(("p#x",)).fingerprint)
    assert content_changed(other, marked) is None
    edited = main_text(parse_html(_page(QUOTES[4], content=CONTENT + " more")), rules)
    assert content_changed(marked, page_signature(edited, rules.fingerprint)) is True
    assert content_changed(marked, marked) is False


# -- a crawl over real HTTP -----------------------------------------------------------------

PAGES_ON_SITE = 12


class TeaserSite(LoopbackHost):
    """Pages ``/p0`` ... whose teaser is picked at random on every request."""

    def __init__(self, limit_repeats: bool = False) -> None:
        super().__init__()
        #: Answer a page asked again at once with 429 (Retry-After 600), as rate limiters do.
        self.limit_repeats = limit_repeats
        self.content = {f"/p{i}": f"{CONTENT} page {i}" for i in range(PAGES_ON_SITE)}
        self.rng = random.Random(7)
        self.lock = threading.Lock()

    def start(self) -> TeaserSite:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with site.lock:
                    repeated = bool(site.log) and site.log[-1] == self.path
                    site.log.append(self.path)
                    quote = site.rng.choice(QUOTES)
                if repeated and site.limit_repeats:
                    self.send_response(429)
                    self.send_header("Retry-After", "600")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/robots.txt":
                    respond(self, 200, "text/plain", "User-agent: *\nAllow: /\n")
                elif self.path in site.content:
                    page = _page(quote, content=site.content[self.path])
                    respond(self, 200, "text/html; charset=utf-8", page)
                else:
                    self.send_error(404)

            def log_message(self, *args: object) -> None:
                pass

        self.serve(Handler)
        return self


@pytest.fixture
def site() -> Iterator[TeaserSite]:
    host = TeaserSite().start()
    yield host
    host.stop()


_POLICY = LeasePolicy(lease_seconds=30, max_urls=50, max_urls_per_host=50, max_hosts=1)


def _settings(twins: int = NOISE_TWINS) -> CrawlSettings:
    return CrawlSettings(
        politeness=PolitenessPolicy(min_delay=0.01, max_delay=1.0, duration_factor=0.0),
        limits=FetchLimits(allow_private=True),
        idle_sleep=0.05,
        sitemaps=False,
        noise_twins=twins,
    )


def _crawl(db: Database, twins: int = NOISE_TWINS) -> CrawlStats:
    return run_crawl(
        db,
        lambda: LeaseQueue(db, _POLICY),
        _settings(twins),
        workers=1,
        until_idle=True,
        seconds=60,
    )


def _all_due(db: Database) -> None:
    with db.write() as conn:
        conn.execute(update(PAGES).where(PAGES.c.status == "ok").values(next_due_at=utcnow()))
    recompute_ready(db)


def _changed(db: Database) -> list[bool | None]:
    with db.read() as conn:
        query = select(OBSERVATIONS.c.changed).order_by(OBSERVATIONS.c.id)
        return list(conn.execute(query).scalars())


def _host(db: Database) -> tuple[str | None, datetime | None]:
    with db.read() as conn:
        row = conn.execute(select(HOSTS.c.noise_rules, HOSTS.c.noise_checked_at)).one()
    return row.noise_rules, row.noise_checked_at


def test_without_rules_a_rotating_teaser_is_a_change_at_nearly_every_fetch(
    sqlite_store: Database, site: TeaserSite
) -> None:
    db = sqlite_store
    add_pages(db, [(site.url(path), site.origin) for path in site.content])
    _crawl(db, twins=0)
    _all_due(db)
    _crawl(db, twins=0)
    second = _changed(db)[PAGES_ON_SITE:]
    assert len(second) == PAGES_ON_SITE
    assert sum(c is True for c in second) >= PAGES_ON_SITE // 2  # 5 in 6 by chance
    assert _host(db) == (None, None)


def test_the_first_lease_learns_the_sites_noise_and_no_fetch_counts_it(
    db: Database, site: TeaserSite
) -> None:
    add_pages(db, [(site.url(path), site.origin) for path in site.content])
    stats = _crawl(db)
    requested = [p for p in site.log if p != "/robots.txt"]
    assert len(requested) == PAGES_ON_SITE + NOISE_TWINS
    assert len(set(requested[: NOISE_TWINS + 1])) == 1  # the first page, then its twins
    assert stats.noise_checks == NOISE_TWINS and stats.noise_found == 1
    rules, checked = _host(db)
    assert rules == "div.box.teaser" and checked is not None
    st = read_status(db)
    assert (st.noise_checked_hosts, st.noisy_hosts) == (1, 1)

    _all_due(db)
    site.content["/p3"] += " and a paragraph added by an editor"
    site.log.clear()
    _crawl(db)
    assert len([p for p in site.log if p != "/robots.txt"]) == PAGES_ON_SITE  # no twin
    second = _changed(db)[PAGES_ON_SITE:]
    with db.read() as conn:
        ids: dict[str, int] = {
            url: page_id for url, page_id in conn.execute(select(PAGES.c.url, PAGES.c.id))
        }
        order = list(
            conn.execute(select(OBSERVATIONS.c.page_id).order_by(OBSERVATIONS.c.id)).scalars()
        )[PAGES_ON_SITE:]
    edited = order.index(ids[site.url("/p3")])
    assert second[edited] is True  # the real edit
    assert [c for i, c in enumerate(second) if i != edited] == [False] * (PAGES_ON_SITE - 1)
    assert _host(db) == (rules, checked)


def test_crawl_noise_twins_sets_how_many_twins_a_check_fetches(
    sqlite_store: Database, site: TeaserSite
) -> None:
    settings = load_settings({}, environ={"CRAWLPLAN_NOISE_TWINS": "1"}).crawl_settings()
    assert settings.noise_twins == 1
    add_pages(sqlite_store, [(site.url(path), site.origin) for path in site.content])
    stats = _crawl(sqlite_store, twins=settings.noise_twins)
    requested = [p for p in site.log if p != "/robots.txt"]
    assert len(requested) == PAGES_ON_SITE + 1 and stats.noise_checks == 1
    assert _host(sqlite_store)[0] == "div.box.teaser"  # one twin differs: odds 5 in 6
    with pytest.raises(ValueError, match="noise_twins must be >= 0"):
        CrawlSettings(noise_twins=-1)


def test_the_check_runs_again_once_it_is_older_than_the_recheck_time(
    sqlite_store: Database, site: TeaserSite
) -> None:
    db = sqlite_store
    add_pages(db, [(site.url(path), site.origin) for path in site.content])
    with db.write() as conn:  # checked long ago, with rules the site no longer has
        old = utcnow() - NOISE_RECHECK - timedelta(days=1)
        conn.execute(update(HOSTS).values(noise_rules="span#gone", noise_checked_at=old))
    _crawl(db)
    rules, checked = _host(db)
    # what earlier checks taught stays (a checked page may lack some of the site's noise)
    assert rules == "div.box.teaser\nspan#gone" and checked is not None and checked > old
    requested = [p for p in site.log if p != "/robots.txt"]
    assert len(requested) == PAGES_ON_SITE + NOISE_TWINS


def test_malformed_stored_rules_are_learned_again(sqlite_store: Database, site: TeaserSite) -> None:
    db = sqlite_store
    add_pages(db, [(site.url(path), site.origin) for path in site.content])
    with db.write() as conn:
        conn.execute(update(HOSTS).values(noise_rules="not a rule", noise_checked_at=utcnow()))
    _crawl(db)
    assert _host(db)[0] == "div.box.teaser"


def test_remote_workers_learn_and_hand_back_noise_rules(
    db: Database, site: TeaserSite, backend_url: str
) -> None:
    """Rules travel with the lease and the give-back through the worker API."""
    add_pages(db, [(site.url(path), site.origin) for path in site.content])
    api_settings = ApiSettings(
        tokens=(TOKEN,), policy=_POLICY, release_every=None, allow_private=True
    )
    with ApiServer(db, api_settings) as api:
        run_workers(
            lambda: RemoteWorkQueue(api.url, TOKEN), _settings(), workers=1, until_idle=True
        )
        assert _host(db)[0] == "div.box.teaser"
        _all_due(db)
        site.log.clear()
        run_workers(
            lambda: RemoteWorkQueue(api.url, TOKEN), _settings(), workers=1, until_idle=True
        )
    assert len([p for p in site.log if p != "/robots.txt"]) == PAGES_ON_SITE  # no twin
    assert _changed(db)[PAGES_ON_SITE:] == [False] * PAGES_ON_SITE
    shown = CliRunner().invoke(app, ["status", "--db", backend_url])
    assert shown.exit_code == 0, shown.output
    assert "noise    1 host checked by a twin fetch, 1 with noise rules" in shown.output


def test_a_twin_answered_429_backs_the_host_off(sqlite_store: Database) -> None:
    """Three quick repeats of one URL are what rate limiters watch for: a twin answered 429
    ends the check and the host's lease, backed off by the Retry-After; the page itself is
    observed."""
    db = sqlite_store
    site = TeaserSite(limit_repeats=True).start()
    try:
        add_pages(db, [(site.url(path), site.origin) for path in site.content])
        run_crawl(db, lambda: LeaseQueue(db, _POLICY), _settings(), workers=1, seconds=4)
        requested = [p for p in site.log if p != "/robots.txt"]
        assert requested == ["/p0", "/p0"]  # the page, one twin, then nothing
        assert _changed(db) == [None]  # the first fetch of /p0
        with db.read() as conn:
            backoff = conn.execute(select(HOSTS.c.backoff_until)).scalar_one()
        assert backoff is not None and backoff > utcnow() + timedelta(seconds=500)
        assert _host(db) == (None, None)  # nothing learned, checked again next lease
    finally:
        site.stop()

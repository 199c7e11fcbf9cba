"""Freshness on a real documentation site: crawlplan beside a uniform recrawl, at one budget.

Run as a script (``python tests/benchmarks/realweb_freshness.py``; not part of ``make
bench``: about 12 minutes). Needs nginx and Debian's ``postgresql-doc-15`` (``make setup``).

The site is the PostgreSQL 15 documentation (1,169 XHTML pages, its own link structure, sizes
of 1-445 KB), served by nginx on loopback with per-request noise in every page
(:mod:`tests.realweb.nginx_site`), one copy for each crawl. Nobody tuned crawlplan to it. A
mutator edits the files while the crawls run, the same edit at the same instant in both
copies (a paragraph added before the footer, :func:`tests.realweb.nginx_site.edit_page`):
nginx then answers with the file's new mtime as Last-Modified, as a static site does. Change
rates follow the site's sections (a page's section is its file name up to the first ``-``:
``sql``, ``functions``, ``release``...): each section's median drawn log-uniform between
``--rate-low`` and ``--rate-high`` changes a second, each page's rate that times a
log-normal factor (sigma 1), and a share ``--static`` of the pages never changes.

Each crawl is the production loop in this process: its own SQLite store seeded with the
site's root URL alone (the crawl finds the pages by their links), ``crawlplan nightly`` at
every cycle's end, a releaser thread doing what the worker API does
(:func:`service.pipeline.release_period`, checked ten times a period), and a worker pool
(:func:`crawler.worker.run_crawl`, two threads) leasing from the store. crawlplan plans; the
uniform side runs the nightly with ``optimize`` off (one rate for every page) and releases a
strict round robin. Both have the same crawls per period.

Freshness is measured from what each crawl stored and what the mutator did, never from the
crawler's own account of changes: a page is fresh at ``t`` when its latest answered fetch
before ``t`` came after its latest edit before ``t``, averaged over the pages the site links
(never-fetched pages count as stale) every 0.5 s from the end of the warm-up (one uniform
revisit interval after the first lap) to the end. Printed beside them: the references
computed from the true rates at the same budget (the uniform recrawl and the
freshness-optimal schedule), crawlplan's share of the optimum's gain over the measured
uniform, and the crawls each side made in the measured window.

Each changing page's file is dated, before the run, as if it had changed at its rate all
along (its last change an exponential time back): a site in its steady state. With
``--package-dates`` the files keep the package's dates (weeks old) until the mutator first
edits them: the site wakes up when the run starts. Its seconds stand for days, so weeks of
quiet are what a real site's dates would say of a page quiet for centuries, and the crawl
believes them (docs/benchmarks.md, "Freshness on a real documentation site");
``--date-horizon P`` lets a first fetch's date count for at most ``P`` periods
(``LastModifiedPolicy.max_date_age``).

Options: ``--period`` (seconds), ``--periods`` (a cycle), ``--cycles``, ``--share`` (of the
pages crawled a period), ``--rate-low``, ``--rate-high``, ``--static``, ``--seed``,
``--package-dates``, ``--date-horizon``, ``--follow-ups``, ``--dir``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC
from pathlib import Path

import numpy as np
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from crawler.urls import normalize_url
from crawler.worker import run_crawl
from planner.cycle.due_urls import DUE_SHARE
from scenarios.demo_report import reference_freshness, share_of_gain
from service.demo import DemoSettings, run_settings
from service.nightly import NightlySettings, run_nightly
from service.pipeline import release_period
from store import Database, LeaseQueue, add_pages, open_database, upgrade_schema
from store.models import OBSERVATIONS, PAGES
from tests.realweb.nginx_site import (
    DOC_TREE,
    NginxSite,
    edit_page,
    missing,
    reachable_pages,
)

#: The crawl's least delay between two requests to the site (seconds): one host carries the
#: whole budget here.
MIN_DELAY = 0.01
#: Answers that bring the page's current content (a 304 confirms the copy held).
ANSWERED = (200, 304)


def true_rates(paths: list[str], rng: np.random.Generator, args: argparse.Namespace) -> np.ndarray:
    """Changes a second per page: section medians log-uniform, a log-normal factor per page,
    a share of static pages."""
    sections = sorted({_section(p) for p in paths})
    lo, hi = np.log(args.rate_low), np.log(args.rate_high)
    median = dict(zip(sections, np.exp(rng.uniform(lo, hi, len(sections))), strict=True))
    rate = np.array([median[_section(p)] for p in paths]) * np.exp(rng.normal(0, 1, len(paths)))
    rate[rng.random(len(paths)) < args.static] = 0.0
    return rate


def _section(path: str) -> str:
    return path.rsplit("/", 1)[-1].split("-", 1)[0].removesuffix(".html")


def backdate(
    roots: list[Path], paths: list[str], rate: np.ndarray, rng: np.random.Generator
) -> None:
    """Each changing page's mtime set to its last change before now had it changed at its
    rate all along (a backward recurrence time, exponential): a site in its steady state,
    where the package's dates say the pages slept for years before the run."""
    now = time.time()
    for page in np.flatnonzero(rate > 0):
        at = now - rng.exponential(1 / rate[page])
        for root in roots:
            os.utime(root / paths[page].lstrip("/"), (at, at))


class Mutator(threading.Thread):
    """Edits the pages at their Poisson change times, in every copy at once; records when."""

    def __init__(
        self,
        roots: list[Path],
        paths: list[str],
        rate: np.ndarray,
        seconds: float,
        rng: np.random.Generator,
    ) -> None:
        super().__init__(name="mutator", daemon=True)
        events = []
        for page, lam in enumerate(rate):
            if lam > 0:
                t = np.cumsum(rng.exponential(1 / lam, int(lam * seconds * 2) + 10))
                events += [(float(at), page) for at in t[t < seconds]]
        self.events = sorted(events)
        self.roots, self.paths = roots, paths
        self.edits: list[list[float]] = [[] for _ in paths]
        self.stop = threading.Event()
        self.start_at = 0.0

    def run(self) -> None:
        for number, (at, page) in enumerate(self.events):
            if self.stop.wait(max(self.start_at + at - time.time(), 0.0)):
                return
            for root in self.roots:
                edit_page(root / self.paths[page].lstrip("/"), number)
            self.edits[page].append(time.time())


class Side:
    """One crawl: its store, its releaser thread and its worker pool."""

    def __init__(self, name: str, work: Path, origin: str, nightly: NightlySettings) -> None:
        self.name, self.origin, self.nightly = name, origin, nightly
        path = work / f"{name}.db"
        self.db: Database = open_database(f"sqlite:///{path}", create=True)
        upgrade_schema(self.db)
        add_pages(self.db, [(origin + "/", origin)])
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def release_loop(self, every: float) -> None:
        # the uniform side a strict round robin, as the live loop's (service.demo)
        share = 1.0 if self.name == "uniform" else DUE_SHARE
        while not self.stop.wait(every):
            try:
                release_period(self.db, min_delay_seconds=MIN_DELAY, due_share=share)
            except Exception as error:  # a release that fails is tried again, as the API does
                print(f"  release ({self.name}) failed: {error}", flush=True)

    def start(self, crawl: object, lease_policy: object, every: float) -> None:
        policy = lease_policy
        self.threads = [
            threading.Thread(target=self.release_loop, args=(every,), daemon=True),
            threading.Thread(
                target=run_crawl,
                args=(self.db, lambda: LeaseQueue(self.db, policy), crawl),  # type: ignore[arg-type]
                kwargs={"workers": 2, "stop": self.stop},
                daemon=True,
            ),
        ]
        for thread in self.threads:
            thread.start()

    def fetches(self, paths: list[str]) -> list[np.ndarray]:
        """Per page, the epoch seconds of its answered fetches, sorted."""
        index = {normalize_url(self.origin + p): i for i, p in enumerate(paths)}
        index[normalize_url(self.origin + "/")] = index[normalize_url(self.origin + "/index.html")]
        o = OBSERVATIONS.c
        out: list[list[float]] = [[] for _ in paths]
        with self.db.read() as conn:
            rows = conn.execute(
                select(PAGES.c.url, o.fetched_at)
                .join(OBSERVATIONS, o.page_id == PAGES.c.id)
                .where(o.http_status.in_(ANSWERED))
            ).all()
        for url, at in rows:
            page = index.get(url)
            if page is not None:
                when = at if at.tzinfo else at.replace(tzinfo=UTC)
                out[page].append(when.timestamp())
        return [np.sort(np.array(t)) for t in out]


def freshness(fetches: list[np.ndarray], edits: list[list[float]], times: np.ndarray) -> float:
    """Time-averaged share of pages whose latest fetch before each of ``times`` came after
    their latest edit before it."""
    fresh = np.zeros(len(times))
    for fetched, edited in zip(fetches, edits, strict=True):
        last_fetch = np.full(len(times), -np.inf)
        k = np.searchsorted(fetched, times, side="right")
        last_fetch[k > 0] = fetched[k[k > 0] - 1]
        e = np.asarray(edited)
        j = np.searchsorted(e, times, side="right")
        last_edit = np.where(j > 0, e[np.maximum(j - 1, 0)] if e.size else 0.0, -np.inf)
        fresh += np.isfinite(last_fetch) & (last_fetch >= last_edit)
    return float(fresh.mean() / len(fetches))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--period", type=float, default=4.0)
    parser.add_argument("--periods", type=int, default=6)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--share", type=float, default=0.05)
    parser.add_argument("--rate-low", type=float, default=1 / 2000)
    parser.add_argument("--rate-high", type=float, default=1 / 10)
    parser.add_argument("--static", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--package-dates",
        action="store_true",
        help="keep the package's dates until the first edit: the site wakes up",
    )
    parser.add_argument(
        "--date-horizon",
        type=float,
        default=None,
        help="periods a first fetch's date counts for at most (LastModifiedPolicy.max_date_age)",
    )
    parser.add_argument(
        "--follow-ups",
        action="store_true",
        help="crawlplan's nightly runs with plan.follow_ups = on (off by default)",
    )
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if (why := missing()) is not None:
        raise SystemExit(f"realweb_freshness: {why}")
    work = args.dir or Path(tempfile.mkdtemp(prefix="realweb-freshness-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    roots = [work / "site-crawlplan", work / "site-uniform"]
    for root in roots:
        shutil.copytree(DOC_TREE, root)
    paths = sorted(reachable_pages(roots[0]))
    rng = np.random.default_rng(args.seed)
    rate = true_rates(paths, rng, args)
    n = len(paths)
    budget = max(1, round(args.share * n))
    duration = args.period * args.periods * args.cycles
    revisit = n * args.period / budget
    demo = DemoSettings(
        directory=work, hosts=1, pages=n, period=args.period, periods=args.periods,
        capacity=budget, workers=2,
    )  # fmt: skip
    settings, nightly = run_settings(demo, revisit)
    nightly = replace(nightly, min_delay_seconds=MIN_DELAY, follow_ups=args.follow_ups)
    if args.date_horizon is not None:
        policy = nightly.last_modified or settings.last_modified_policy
        horizon = args.date_horizon * args.period / 86_400
        nightly = replace(nightly, last_modified=replace(policy, max_date_age=horizon))
    crawl = settings.crawl_settings(allow_private=True)
    crawl = replace(crawl, politeness=replace(crawl.politeness, min_delay=MIN_DELAY))
    print(
        f"real site: {n:,} pages of {DOC_TREE} on nginx, {len({_section(p) for p in paths})} "
        f"sections, rates {args.rate_low:g}-{args.rate_high:g} a second by section, "
        f"{np.mean(rate == 0):.0%} static; {budget} crawls per {args.period:g} s period "
        f"(a page every {revisit:.0f} s uniformly), {args.cycles} cycles of {args.periods} "
        f"periods ({duration:.0f} s)",
        flush=True,
    )
    if not args.package_dates:
        backdate(roots, paths, rate, rng)
    mutator = Mutator(roots, paths, rate, duration + 60, rng)
    with (
        NginxSite(roots[0], work / "nginx-crawlplan") as site_a,
        NginxSite(roots[1], work / "nginx-uniform") as site_b,
    ):
        sides = [
            Side("crawlplan", work, site_a.origin, nightly),
            Side("uniform", work, site_b.origin, replace(nightly, optimize=False)),
        ]
        for side in sides:
            run_nightly(side.db, side.nightly)
        mutator.start_at = time.time()
        mutator.start()
        began = time.time()
        for side in sides:
            side.start(crawl, settings.lease_policy, args.period / 10)
        with ThreadPoolExecutor(max_workers=2) as pool:
            for cycle in range(1, args.cycles + 1):
                time.sleep(max(began + cycle * args.period * args.periods - time.time(), 0.0))
                if cycle < args.cycles:
                    done = list(pool.map(lambda s: run_nightly(s.db, s.nightly), sides))
                    print(
                        f"cycle {cycle}: plans {', '.join(d.status for d in done)}; "
                        f"pages marked for a probe {done[0].probes}, for a follow-up "
                        f"{done[0].follow_ups}",
                        flush=True,
                    )
        ended = time.time()
        for side in sides:
            side.stop.set()
        mutator.stop.set()
        for side in sides:
            for thread in side.threads:
                thread.join(timeout=60)
    warm = began + 2 * revisit  # the first lap finds the pages, the second revisits them
    times = np.arange(warm, ended, 0.5)
    figures = {}
    for side in sides:
        fetched = side.fetches(paths)
        crawls = sum(int(((f >= warm) & (f < ended)).sum()) for f in fetched)
        figures[side.name] = (freshness(fetched, mutator.edits, times), crawls)
    ref = reference_freshness(rate * args.period, float(budget))
    planned, uniform = figures["crawlplan"][0], figures["uniform"][0]
    print(
        f"steady state ({ended - warm:.0f} s from {warm - began:.0f} s): freshness crawlplan "
        f"{planned:.3f} ({figures['crawlplan'][1]:,} crawls), uniform {uniform:.3f} "
        f"({figures['uniform'][1]:,} crawls); computed from the true rates: uniform "
        f"{ref.uniform:.3f}, optimum {ref.optimum:.3f}; crawlplan's share of the optimum's "
        f"gain over uniform: {share_of_gain(planned, uniform, ref.optimum):.0%}; "
        f"{sum(len(e) for e in mutator.edits):,} edits",
        flush=True,
    )


if __name__ == "__main__":
    main()

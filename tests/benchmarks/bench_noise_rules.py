"""Per-request noise on a real site, with and without learned noise rules (``make bench``).

nginx serves the PostgreSQL 15 documentation on loopback with a teaser picked among 16 per
request in every page, plus the time, a visitor number and a request id
(``tests/realweb/nginx_site.py``). Each round crawls the whole site, moves the mtime of 50
pages (so nginx answers them 200, with fresh noise, not 304) and crawls those again; it
counts the touched pages whose second fetch was recorded as changed. Baseline, same run:
the crawler with ``noise_twins = 0`` (noise masked by its look alone). Rounds alternate off
and on. Skips with one line without nginx or the doc package.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import select, update

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.realweb, tests.conftest

from crawler.fetch import FetchLimits
from crawler.noise import NOISE_TWINS
from crawler.politeness import PolitenessPolicy
from crawler.worker import CrawlSettings, run_crawl
from store import (
    Database,
    LeasePolicy,
    LeaseQueue,
    add_pages,
    open_database,
    recompute_ready,
    upgrade_schema,
)
from store.models import Host, Observation, Page
from store.types import utcnow
from tests.conftest import orm_all
from tests.realweb.nginx_site import DOC_TREE, NginxSite, missing

TOUCHED = 50
ROBOTS = "User-agent: *\nDisallow: /ecpg-\n"  # as tests/realweb/test_docs_site.py


def _crawl(db: Database, settings: CrawlSettings) -> None:
    policy = LeasePolicy(lease_seconds=60, max_urls=200, max_urls_per_host=200, max_hosts=1)
    run_crawl(db, lambda: LeaseQueue(db, policy), settings, workers=2, until_idle=True)


def one_round(learn: bool, seed: int) -> tuple[int, str | None]:
    """Touched pages counted as changed (of :data:`TOUCHED`), and the host's rules."""
    work = Path(tempfile.mkdtemp(prefix="noise-"))
    try:
        root = work / "site"
        shutil.copytree(DOC_TREE, root)
        (root / "robots.txt").write_text(ROBOTS)
        db = open_database(f"sqlite:///{work / 'crawl.db'}", create=True)
        upgrade_schema(db)
        settings = CrawlSettings(
            politeness=PolitenessPolicy(min_delay=0.004, max_delay=1.0, duration_factor=1.0),
            limits=FetchLimits(allow_private=True),
            max_urls=200,
            idle_sleep=0.05,
            noise_twins=NOISE_TWINS if learn else 0,
        )
        with NginxSite(root, work / "nginx") as nginx:
            add_pages(db, [(nginx.origin + "/", nginx.origin)])
            _crawl(db, settings)
            pages = [p for p in orm_all(db, select(Page)) if p.status == "ok"]
            pages = [p for p in pages if p.url.endswith(".html")]
            random.Random(seed).shuffle(pages)
            touched = [p.id for p in pages[:TOUCHED]]
            later = time.time() + 5
            for page in pages[:TOUCHED]:
                path = root / page.url.split("/", 3)[3]
                os.utime(path, (later, later))
            with db.write() as conn:
                conn.execute(update(Page).where(Page.id.in_(touched)).values(next_due_at=utcnow()))
            recompute_ready(db)
            _crawl(db, settings)
        query = select(Observation).where(Observation.page_id.in_(touched))
        latest = {o.page_id: o for o in orm_all(db, query.order_by(Observation.id))}
        rules = orm_all(db, select(Host))[0].noise_rules
        db.dispose()
        return sum(o.changed is True for o in latest.values()), rules
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each (default 2)")
    args = parser.parse_args(argv)
    if (why := missing()) is not None:
        print(f"bench_noise_rules skipped: {why}")
        return 0
    print(f"site: {DOC_TREE}, {TOUCHED} pages touched (mtime moved) and fetched again")
    print("\n| round | noise rules | touched pages counted as changed | rules learned |")
    print("|---|---|---|---|")
    for number in range(args.rounds):
        for learn in (False, True):
            counted, rules = one_round(learn, seed=27 + number)
            shown = (rules or "").replace("\n", ", ") or "-"
            print(f"| {number + 1} | {'on' if learn else 'off'} | {counted}/{TOUCHED} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

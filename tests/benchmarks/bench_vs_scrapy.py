"""Crawl throughput beside Scrapy and a plain ``requests`` loop, on nginx (``make bench``).

Issue 27: "crawlplan beside Scrapy and a plain ``requests`` loop on the same nginx site,
alternating runs, pages/s and CPU ms per page, at equal per-host concurrency."

The site: nginx (Debian's) on loopback serving a copy of Debian's ``postgresql-doc-15`` HTML
tree as 8 hosts, ``127.0.0.1`` to ``127.0.0.8`` (a server block each, the same files, no
robots.txt, no per-request noise), so that per-host concurrency matters. Every crawl starts
from the 8 root pages and discovers the rest by following links, kept to those hosts:

- crawlplan, through its Python API: a new SQLite store with the 8 roots seeded,
  ``run_crawl`` (one process, ``--workers`` threads) and ``run_crawl_processes``; one request
  in flight per host (a lease is one host crawled sequentially), politeness delay 0, the
  product's lease policy; it parses every page, extracts and normalizes links, computes the
  signature, and writes observations, new pages and OPIC cash to the store;
- Scrapy: a ``CrawlSpider`` with one ``LinkExtractor`` rule kept to the 8 origins,
  ``CONCURRENT_REQUESTS_PER_DOMAIN=1`` (one request in flight per host, as crawlplan),
  ``CONCURRENT_REQUESTS`` 8 and 32, ``DOWNLOAD_DELAY=0``, robots.txt obeyed, no
  AutoThrottle; it parses every page and extracts links; it stores nothing;
- a plain ``requests`` loop: one thread and one ``Session`` per host over the URLs the
  warm-up crawl fetched, reading each body and parsing nothing (the ceiling).

A warm-up crawlplan crawl comes first (not counted: it fills the page cache and gives the
loop its URLs); then ``--rounds`` rounds, each running every crawler once, the order rotated
from round to round. Each crawler runs in a child process of its own: pages/s and CPU time
are measured inside it around the crawl alone (CPU: user + system of that process and the
processes it started and waited for, not nginx's; imports and store creation are not
counted), peak RSS is the child's (``wait4``; with several crawl processes, the largest).
Scrapy is installed by ``make bench`` (not a project dependency); without it, its rows are
skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages and tests/
    sys.path.insert(0, str(ROOT))
#: A child crawls with the crawlplan code in this directory when set (``--compare``): a copy
#: of the tree at another state, for before/after figures in one run.
CODE = os.environ.get("BENCH_VS_SCRAPY_CODE")
if CODE:
    sys.path.insert(0, CODE)

from tests.realweb.nginx_site import DOC_TREE, NginxSite, missing  # noqa: E402

USER_AGENT = "crawlplan-bench/1.0"
#: A crawl that takes longer than this has gone wrong.
CRAWL_SECONDS = 900


# -- the crawlers, each run in a child process -------------------------------------------------
def _usage() -> float:
    """CPU seconds (user + system) of this process and of its children that ended."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def crawl_crawlplan(origins: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """crawlplan from the roots: a new SQLite store, ``args.processes`` processes."""
    from functools import partial

    from sqlalchemy import select

    from crawler.fetch import FetchLimits
    from crawler.politeness import PolitenessPolicy
    from crawler.processes import run_crawl_processes
    from crawler.scope import CrawlScope
    from crawler.worker import CrawlSettings, run_crawl
    from store import LeasePolicy, LeaseQueue, add_pages, open_database, upgrade_schema
    from store.models import Page

    work = Path(tempfile.mkdtemp(prefix="bench-crawlplan-"))
    db_url = f"sqlite:///{work / 'crawl.db'}"
    db = open_database(db_url, create=True)
    upgrade_schema(db)
    add_pages(db, [(origin + "/", origin) for origin in origins])
    settings = CrawlSettings(
        user_agent=USER_AGENT,
        politeness=PolitenessPolicy(min_delay=0.0, duration_factor=0.0, max_per_host=args.per_host),
        limits=FetchLimits(allow_private=True),
        scope=CrawlScope("hosts"),
        sitemaps=False,
        idle_sleep=args.idle_sleep,
    )
    policy = LeasePolicy()  # the product's: 100 URLs a lease call, 20 a host, 20 hosts
    cpu0, t0 = _usage(), time.perf_counter()
    if args.processes == 1:
        stats = run_crawl(
            db,
            partial(LeaseQueue, db, policy),
            settings,
            workers=args.workers,
            until_idle=True,
            seconds=CRAWL_SECONDS,
        )
    else:
        stats = run_crawl_processes(
            db_url,
            policy,
            settings,
            processes=args.processes,
            workers=max(1, args.workers // args.processes),
            until_idle=True,
            seconds=CRAWL_SECONDS,
        )
    seconds, cpu = time.perf_counter() - t0, _usage() - cpu0
    with db.engine.connect() as conn:
        fetched = list(conn.scalars(select(Page.url).where(Page.fetches > 0)))
    if args.urls:
        Path(args.urls).write_text("\n".join(sorted(fetched)) + "\n")
    db.engine.dispose()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "pages": stats.fetched,
        "seconds": seconds,
        "cpu": cpu,
        "errors": stats.errors,
        "stored": len(fetched),
        "leases": stats.leases,
    }


def crawl_scrapy(origins: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Scrapy's CrawlSpider from the roots, ``args.concurrency`` requests in flight in all."""
    import re

    from scrapy.crawler import CrawlerProcess
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    counts = {"pages": 0}

    class BenchSpider(CrawlSpider):
        name = "bench"
        start_urls = [origin + "/" for origin in origins]  # noqa: RUF012 (Scrapy's way)
        rules = (
            Rule(
                LinkExtractor(allow=[re.escape(origin) + "/" for origin in origins]),
                callback="parse_page",
                follow=True,
            ),
        )

        def parse_start_url(self, response: Any, **kwargs: Any) -> list[Any]:
            counts["pages"] += 1
            return []

        def parse_page(self, response: Any) -> None:
            counts["pages"] += 1

    process = CrawlerProcess(
        {
            "USER_AGENT": USER_AGENT,
            "ROBOTSTXT_OBEY": True,
            "CONCURRENT_REQUESTS": args.concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": args.per_host,
            "DOWNLOAD_DELAY": 0,
            "AUTOTHROTTLE_ENABLED": False,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "CLOSESPIDER_TIMEOUT": CRAWL_SECONDS,
            **({"TWISTED_REACTOR": args.reactor} if args.reactor else {}),
        }
    )
    crawler = process.create_crawler(BenchSpider)
    process.crawl(crawler)
    cpu0, t0 = _usage(), time.perf_counter()
    process.start()
    seconds, cpu = time.perf_counter() - t0, _usage() - cpu0
    stats = crawler.stats.get_stats() if crawler.stats else {}
    return {
        "pages": counts["pages"],
        "seconds": seconds,
        "cpu": cpu,
        "errors": int(stats.get("log_count/ERROR", 0)),
    }


def crawl_requests(origins: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """A plain loop: one thread and one Session per host over the URLs a crawl fetched."""
    import requests

    urls = Path(args.urls).read_text().split()
    by_host: dict[str, list[str]] = {origin: [] for origin in origins}
    for url in urls:
        origin = "/".join(url.split("/", 3)[:3])
        by_host[origin].append(url)
    counts = {"pages": 0, "errors": 0}
    lock = threading.Lock()

    def loop(host_urls: list[str]) -> None:
        ok = errors = 0
        with requests.Session() as session:
            session.headers["User-Agent"] = USER_AGENT
            for url in host_urls:
                response = session.get(url, timeout=30)
                response.content  # noqa: B018 (the whole body, as a crawler reads it)
                if response.status_code == 200:
                    ok += 1
                else:
                    errors += 1
        with lock:
            counts["pages"] += ok
            counts["errors"] += errors

    threads = [threading.Thread(target=loop, args=(u,)) for u in by_host.values()]
    cpu0, t0 = _usage(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds, cpu = time.perf_counter() - t0, _usage() - cpu0
    return {"pages": counts["pages"], "seconds": seconds, "cpu": cpu, "errors": counts["errors"]}


def crawl_stages(origins: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Where a crawled page's CPU time goes outside the store and the threads: every URL the
    warm-up crawl fetched, fetched and read again in one thread with the crawler's own
    functions, each stage timed in thread CPU time (``time.thread_time``)."""
    from crawler.fetch import Fetcher, FetchLimits
    from crawler.links import extract_links, parse_html
    from crawler.scope import CrawlScope
    from crawler.signature import main_text, page_signature
    from crawler.urls import origin_of

    limits = FetchLimits(allow_private=True)
    fetchers = {origin: Fetcher(limits, user_agent=USER_AGENT) for origin in origins}
    scope = CrawlScope("hosts")
    spent = dict.fromkeys(("fetch", "parse", "links", "main_text", "page_signature"), 0.0)
    pages = 0
    clock = time.thread_time
    t0 = time.perf_counter()
    for url in Path(args.urls).read_text().split():
        origin = origin_of(url)
        c0 = clock()
        outcome = fetchers[origin].fetch(url)
        c1 = clock()
        root = parse_html(outcome.body, outcome.encoding)
        c2 = clock()
        if root is None:
            continue
        scope.followed(extract_links(root, outcome.final_url), origin)
        c3 = clock()
        text = main_text(root)
        c4 = clock()
        page_signature(text)
        c5 = clock()
        for stage, seconds in zip(
            spent, (c1 - c0, c2 - c1, c3 - c2, c4 - c3, c5 - c4), strict=True
        ):
            spent[stage] += seconds
        pages += 1
    for fetcher in fetchers.values():
        fetcher.close()
    return {
        "pages": pages,
        "seconds": time.perf_counter() - t0,
        "cpu": sum(spent.values()),
        "stages": spent,
    }


CRAWLS: dict[str, Callable[[list[str], argparse.Namespace], dict[str, Any]]] = {
    "crawlplan": crawl_crawlplan,
    "scrapy": crawl_scrapy,
    "requests": crawl_requests,
    "stages": crawl_stages,
}


def child_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("crawler", choices=sorted(CRAWLS))
    parser.add_argument("--origins", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--urls")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--reactor", default="")
    parser.add_argument("--idle-sleep", type=float, default=0.02)
    parser.add_argument("--per-host", type=int, default=1)
    args = parser.parse_args(argv)
    result = CRAWLS[args.crawler](args.origins.split(","), args)
    Path(args.result).write_text(json.dumps(result))


# -- the parent: the site, the rounds, the table ---------------------------------------------
class Run:
    """One crawler configuration: a label, its child's command-line arguments, and the
    directory of the crawlplan code it runs (None: this tree)."""

    def __init__(self, label: str, crawler: str, *options: str, code: str | None = None) -> None:
        self.label = label
        self.crawler = crawler
        self.options = list(options)
        self.code = code


def run_child(
    run: Run, origins: list[str], work: Path, urls: Path, nginx: NginxSite
) -> dict[str, Any]:
    """Run ``run`` in a child process; its result, with the child's peak RSS (MiB) and the
    requests nginx answered meanwhile (from its access log)."""
    served = _served(nginx)
    result = work / "result.json"
    result.unlink(missing_ok=True)
    log = work / f"{run.crawler}.log"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        run.crawler,
        "--origins",
        ",".join(origins),
        "--result",
        str(result),
        "--urls",
        str(urls),
        *run.options,
    ]
    env = dict(os.environ)
    env.pop("BENCH_VS_SCRAPY_CODE", None)
    if run.code:
        env["BENCH_VS_SCRAPY_CODE"] = run.code
    with log.open("w") as out:
        child = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=run.code or ROOT, env=env
        )
        _pid, status, usage = os.wait4(child.pid, 0)  # this child's own rusage: its peak RSS
        child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0 or not result.exists():
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{run.label} exited with {child.returncode}:\n{tail}")
    found: dict[str, Any] = json.loads(result.read_text())
    found["rss_mib"] = usage.ru_maxrss / 1024
    found["requests"] = _served(nginx) - served
    return found


def _served(nginx: NginxSite) -> int:
    """Lines in nginx's access log: the requests it has answered (logged as each ends)."""
    path = nginx.workdir / "access.log"
    if not path.exists():
        return 0
    with path.open("rb") as log:
        return sum(1 for _ in log)


def _row(label: str, r: dict[str, Any]) -> str:
    rate = r["pages"] / r["seconds"]
    ms = 1e3 * r["cpu"] / max(r["pages"], 1)
    return (
        f"| {label} | {r['pages']:,.0f} | {r['requests']:,.0f} | {r['seconds']:.1f} | "
        f"{rate:,.0f} | {ms:.2f} | {r['rss_mib']:,.0f} |"
    )


HEADER = (
    "| crawler | pages | requests | seconds | pages/s | CPU ms/page | peak RSS MiB |\n"
    "|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--processes",
        type=int,
        nargs="*",
        default=[1, 2],
        help="crawlplan's process counts, each a row (workers split among them)",
    )
    parser.add_argument(
        "--scrapy-concurrency",
        type=int,
        nargs="*",
        default=[8, 32],
        help="Scrapy's CONCURRENT_REQUESTS, each a row (per domain: 1)",
    )
    parser.add_argument("--no-requests", action="store_true", help="no plain requests loop")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also crawlplan (the first --processes count) with the code in DIR, a copy of "
        "the tree at another state (before/after figures in one run); repeatable",
    )
    parser.add_argument("--nginx-workers", type=int, default=1)
    parser.add_argument(
        "--per-host",
        type=int,
        default=1,
        help="requests in flight per host, for both crawlers (crawlplan's crawl.max_per_host, "
        "Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN; default 1)",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="then time each stage of a page's reading, one thread (CPU ms/page)",
    )
    args = parser.parse_args()
    if (why := missing()) is not None:
        print(f"bench_vs_scrapy: skipped: {why}")
        return
    per_host = f"--per-host={args.per_host}"
    lanes = f", {args.per_host} per host" if args.per_host > 1 else ""
    runs = [
        Run(
            f"crawlplan, {p} process{'es' if p > 1 else ''} x {args.workers // p} workers{lanes}",
            "crawlplan",
            f"--workers={args.workers}",
            f"--processes={p}",
            per_host,
        )
        for p in args.processes
    ]
    for spec in args.compare:
        name, _, code = spec.partition("=")
        p = args.processes[0] if args.processes else 1
        runs.append(
            Run(
                f"crawlplan {name}, {p} process{'es' if p > 1 else ''} x {args.workers // p} "
                "workers",
                "crawlplan",
                f"--workers={args.workers}",
                f"--processes={p}",
                code=str(Path(code).resolve()),
            )
        )
    try:
        import scrapy
    except ImportError:
        print("bench_vs_scrapy: Scrapy is not installed (make bench installs it): no Scrapy rows")
    else:
        runs += [
            Run(
                f"Scrapy {scrapy.__version__}, {c} concurrent, {args.per_host} per host",
                "scrapy",
                f"--concurrency={c}",
                per_host,
            )
            for c in args.scrapy_concurrency
        ]
    if not args.no_requests:
        runs.append(Run(f"requests loop, {args.hosts} threads (no parsing)", "requests"))

    work = Path(tempfile.mkdtemp(prefix="bench-vs-scrapy-"))
    site = work / "site"
    shutil.copytree(DOC_TREE, site)
    urls = work / "urls.txt"
    results: dict[str, list[dict[str, Any]]] = {run.label: [] for run in runs}
    try:
        with NginxSite(
            site, work / "nginx", hosts=args.hosts, noise=False, workers=args.nginx_workers
        ) as nginx:
            origins = nginx.origins
            print(f"site: {DOC_TREE} on {len(origins)} hosts, {origins[0]} .. {origins[-1]}")
            print(f"load average at start: {_load()}")
            warm = run_child(runs[0], origins, work, urls, nginx)
            stored = len(urls.read_text().split())
            print(
                f"warm-up ({runs[0].label}): {warm['pages']:,} pages in "
                f"{warm['seconds']:.1f} s, {stored:,} URLs for the requests loop"
            )
            for number in range(args.rounds):
                shift = number % len(runs)
                order = runs[shift:] + runs[:shift]
                print(f"\nround {number + 1}, load average {_load()}\n\n{HEADER}")
                for run in order:
                    found = run_child(run, origins, work, urls, nginx)
                    results[run.label].append(found)
                    print(_row(run.label, found), flush=True)
            if args.stages:
                stages = run_child(Run("stages", "stages"), origins, work, urls, nginx)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nmedian of {args.rounds} rounds, load average at the end {_load()}\n\n{HEADER}")
    for run in runs:
        rounds = results[run.label]
        median = {
            key: statistics.median(r[key] for r in rounds)
            for key in ("pages", "requests", "seconds", "cpu", "rss_mib")
        }
        rates = [r["pages"] / r["seconds"] for r in rounds]
        median["seconds"] = median["pages"] / statistics.median(rates)
        median["cpu"] = (
            statistics.median(r["cpu"] / max(r["pages"], 1) for r in rounds) * (median["pages"])
        )
        print(_row(run.label, median))
    if args.stages:
        pages = max(stages["pages"], 1)
        print(f"\nCPU ms/page by stage, one thread, {stages['pages']:,} pages\n")
        print("| stage | CPU ms/page |\n|---|---|")
        for stage, seconds in stages["stages"].items():
            print(f"| {stage} | {1e3 * seconds / pages:.2f} |")
        print(f"| all | {1e3 * stages['cpu'] / pages:.2f} |")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child_main(sys.argv[2:])
    else:
        main()

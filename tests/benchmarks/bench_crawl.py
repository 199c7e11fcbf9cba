"""Crawl throughput against the synthetic web on loopback (``make bench``).

The server runs in a process of its own (the machine has two cores: one for the server, one
for the crawler), with 200 hosts; politeness delay 0. Every page URL is seeded first, so the
figure is fetch-and-record throughput, not discovery. Baseline, same run, same server: a plain
single-threaded ``requests.Session`` loop over the same URLs, which stores and parses nothing.
Beside each rate, the crawl's own CPU time per page (user + system, of the crawling process
or processes; the server's and the database server's not counted): what other work on the
machine changes least.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import tempfile
import time
import uuid
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path

import psycopg
import requests
from psycopg import sql

from crawler.fetch import FetchLimits
from crawler.politeness import PolitenessPolicy
from crawler.processes import run_crawl_processes
from crawler.urls import normalize_url, origin_of
from crawler.worker import CrawlSettings, run_crawl
from scenarios.synthetic_web import HostBehavior, SyntheticWeb, WebConfig
from scenarios.web_server import WebServer
from store import LeasePolicy, LeaseQueue, add_pages, open_database, upgrade_schema

#: The local PostgreSQL server's admin URL (``--backend postgresql`` creates a database there).
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _config(hosts: int, pages: int) -> WebConfig:
    no_robots = HostBehavior(robots=None)
    return WebConfig(
        hosts=hosts,
        pages_per_host=pages,
        rate_low=1e-4,
        rate_high=1e-2,
        behaviors=dict.fromkeys(range(hosts), no_robots),
    )


def _serve(hosts: int, pages: int, pipe: Connection) -> None:
    with WebServer(SyntheticWeb(_config(hosts, pages))) as server:
        pipe.send(server.origins)
        pipe.recv()  # until the parent says stop


def _store_url(backend: str) -> str:
    """A new, empty store: a SQLite file, or a database on the local PostgreSQL server."""
    if backend == "sqlite":
        return f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}"
    name = f"crawlplan_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"


def _cpu_seconds(processes: int) -> float:
    """CPU time of the crawl so far: this process's (one process crawls here), or that of
    the children that ended (the crawl processes end with the crawl; the server later)."""
    usage = resource.getrusage(resource.RUSAGE_SELF if processes == 1 else resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=200)
    # 100 pages a host (20,000 in all, each host leased four times): long enough that the
    # figure is the steady rate, not the ramp-up of the first leases and the last hosts' tail
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    web = SyntheticWeb(_config(args.hosts, args.pages))
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(args.hosts, args.pages, child), daemon=True)
    proc.start()
    origins: list[str] = parent.recv()
    urls = [origins[int(web.host_of[p])] + web.path(p) for p in range(web.n_pages)]
    try:
        session = requests.Session()
        t0 = time.perf_counter()
        for u in urls:
            session.get(u, timeout=10).content  # noqa: B018
        baseline = len(urls) / (time.perf_counter() - t0)

        settings = CrawlSettings(
            politeness=PolitenessPolicy(min_delay=0.0, duration_factor=0.0),
            limits=FetchLimits(allow_private=True),
            max_urls=100,
            idle_sleep=0.02,
        )
        policy = LeasePolicy(max_urls=100, max_urls_per_host=25, max_hosts=10)
        rates = {}
        cpu_ms = {}
        for processes in (1, args.processes):
            db_url = _store_url(args.backend)
            db = open_database(db_url, create=True)
            upgrade_schema(db)
            add_pages(db, [(normalize_url(u), origin_of(u)) for u in urls])
            t0 = time.perf_counter()
            cpu0 = _cpu_seconds(processes)
            if processes == 1:
                stats = run_crawl(
                    db,
                    partial(LeaseQueue, db, policy),
                    settings,
                    workers=args.workers,
                    until_idle=True,
                )
            else:
                stats = run_crawl_processes(
                    db_url,
                    policy,
                    settings,
                    processes=processes,
                    workers=args.workers // processes,
                    until_idle=True,
                )
            rates[processes] = stats.fetched / (time.perf_counter() - t0)
            cpu_ms[processes] = 1e3 * (_cpu_seconds(processes) - cpu0) / max(stats.fetched, 1)
            db.engine.dispose()
            if args.backend == "postgresql":
                with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                    name = db_url.rsplit("/", 1)[1]
                    conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))
    finally:
        parent.send("stop")
        proc.join(timeout=30)
    print(f"pages: {len(urls):,} on {args.hosts} hosts, politeness delay 0, {args.backend} store")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    line = "{:<46} {:>8,.0f}"
    cpu = "{:<46} {:>8.2f}"
    print(line.format(f"crawlplan crawl, {args.workers} workers (pages/s)", rates[1]))
    print(cpu.format("  its CPU time (ms/page)", cpu_ms[1]))
    print(
        line.format(
            f"crawlplan crawl, {args.processes} processes x {args.workers // args.processes} "
            "workers (pages/s)",
            rates[args.processes],
        )
    )
    print(cpu.format("  its CPU time (ms/page)", cpu_ms[args.processes]))
    print(line.format("baseline: plain requests loop (pages/s)", baseline))
    print(f"{'ratio (best crawl / baseline)':<46} {max(rates.values()) / baseline:>8.2f}")


if __name__ == "__main__":
    main()

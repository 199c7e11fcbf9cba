"""What the fetcher's address guard and deadline watchdog cost, per fetch (issue 26).

Baseline, same run, same servers: the same :class:`~crawler.fetch.Fetcher` on a plain
``requests.Session`` (no address check, no single resolution, no watchdog). Two servers on
loopback: the synthetic web (aiohttp, connections kept alive) and the hostile web's plain
page (a new connection per request). CPU is the whole process's (the servers' threads
included, the same for both); rounds alternate.

Usage: ``.venv/bin/python tests/benchmarks/bench_fetch_guard.py [--fetches N] [--rounds R]``
"""

from __future__ import annotations

import argparse
import resource
import time

import requests

from crawler.fetch import Fetcher, FetchLimits
from scenarios.hostile_web import HostileConfig, HostileWeb
from scenarios.synthetic_web import SyntheticWeb, WebConfig
from scenarios.web_server import WebServer


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run(fetcher: Fetcher, url: str, n: int) -> tuple[float, float]:
    """CPU ms per fetch and fetches per second."""
    fetcher.fetch(url)
    c0, t0 = _cpu(), time.monotonic()
    for _ in range(n):
        outcome = fetcher.fetch(url)
        assert outcome.status == 200, outcome
    return (_cpu() - c0) / n * 1e3, n / (time.monotonic() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fetches", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    limits = FetchLimits(allow_private=True)
    web = SyntheticWeb(WebConfig(hosts=1, pages_per_host=5))
    with WebServer(web) as synthetic, HostileWeb(HostileConfig(bomb_bytes=1024)) as hostile:
        urls = {
            "kept alive": synthetic.url(0),
            "new connection each": hostile.origin("slow-body") + "/ok.html",
        }
        for rnd in range(args.rounds):
            for label, url in urls.items():
                row = []
                for name in ("plain", "guarded"):
                    session = requests.Session() if name == "plain" else None
                    fetcher = Fetcher(limits, session=session)
                    cpu, rate = _run(fetcher, url, args.fetches)
                    fetcher.close()
                    row.append(f"{name} {cpu:.3f} ms CPU, {rate:,.0f}/s")
                print(f"round {rnd}, {label}: " + "; ".join(row))


if __name__ == "__main__":
    main()

"""``crawlplan scenario web``: a small synthetic web on loopback, to crawl while learning.

It serves :class:`scenarios.synthetic_web.SyntheticWeb` with
:class:`scenarios.web_server.WebServer` (127.0.0.1 only, one port per host; pages that change
as Poisson processes, links, robots.txt and a ``/sitemap.xml`` per host) until Ctrl-C,
SIGTERM or ``--seconds``. Standard output gets the seed URLs, one per line (each host's first
page, or every page with ``--all-pages``), so that they can be piped or written with
``--seeds-file`` for ``crawlplan seed --file``; what to do next goes to standard error.
The crawler refuses loopback addresses unless told otherwise: crawl with ``--allow-private``.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.support import err, out, user_errors

if TYPE_CHECKING:
    from scenarios.web_server import WebServer

__all__ = ["web"]


@user_errors
def web(
    hosts: Annotated[
        int, typer.Option("--hosts", min=1, max=64, help="Hosts (one port each).")
    ] = 4,
    pages: Annotated[int, typer.Option("--pages", min=2, help="Pages per host.")] = 50,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the web's shape and changes.")] = 0,
    seeds_file: Annotated[
        Path | None,
        typer.Option(
            "--seeds-file",
            help="Also write the seed URLs to this file (for `crawlplan seed --file`).",
            show_default=False,
        ),
    ] = None,
    all_pages: Annotated[
        bool,
        typer.Option("--all-pages", help="Seed every page, not only each host's first page."),
    ] = False,
    seconds: Annotated[
        float | None,
        typer.Option(
            "--seconds", min=0.1, help="Stop after this many seconds.", show_default=False
        ),
    ] = None,
) -> None:
    """Serve a small synthetic web on loopback (127.0.0.1) and print its seed URLs.

    Pages change as Poisson processes (between about once a second and once every 17
    minutes), link to each other and across hosts; each host has robots.txt and /sitemap.xml.
    Runs until Ctrl-C or SIGTERM (or --seconds). Then, in another terminal:
    crawlplan seed --file SEEDS && crawlplan crawl --allow-private --until-idle.
    """
    from scenarios.synthetic_web import SyntheticWeb, WebConfig
    from scenarios.web_server import WebServer
    from service.errors import InputFileError

    config = WebConfig(hosts=hosts, pages_per_host=pages, seed=seed)
    with WebServer(SyntheticWeb(config), seed=seed) as server:
        urls = _seed_urls(server, all_pages)
        if seeds_file is not None:
            try:
                seeds_file.write_text("".join(f"{u}\n" for u in urls), encoding="utf-8")
            except OSError as error:
                raise InputFileError(f"cannot write {seeds_file}: {error.strerror}") from None
        for url in urls:
            out.print(url, markup=False, soft_wrap=True)
        sys.stdout.flush()
        where = f"written to {seeds_file}" if seeds_file is not None else "on standard output"
        err.print(
            f"synthetic web on loopback: {hosts} hosts x {pages} pages (seed {seed}), "
            f"{len(urls)} seed URLs {where}; each host serves /robots.txt and /sitemap.xml",
            markup=False,
        )
        for host, origin in enumerate(server.origins):
            err.print(f"  host {host}: {origin}", markup=False)
        err.print(
            f"crawl it: crawlplan seed --file {seeds_file or 'SEEDS'} && crawlplan crawl "
            "--allow-private --until-idle; stop the web with Ctrl-C",
            markup=False,
        )
        _wait(seconds)
    err.print("synthetic web stopped", markup=False)


def _seed_urls(server: WebServer, all_pages: bool) -> list[str]:
    """Each host's first page (page 0 of section 0), or every page, as absolute URLs."""
    import numpy as np

    web = server.web
    chosen = np.arange(len(web.host_of)) if all_pages else np.flatnonzero(web.index_in_host == 0)
    return [server.url(int(page)) for page in chosen]


def _wait(seconds: float | None) -> None:
    """Block until SIGINT or SIGTERM (or ``seconds``); the handlers are restored after."""
    stop = threading.Event()

    def request_stop(_signum: int, _frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while not stop.is_set():
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                break
            stop.wait(min(left, 1.0))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

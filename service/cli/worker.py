"""``crawlplan worker``: a remote worker pool that leases and reports over the worker API.

It needs no database credentials, only the API's URL and a bearer token.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.options import (
    AllowPrivateOption,
    ConfigOption,
    SecondsOption,
    UntilIdleOption,
    WorkersOption,
)
from service.cli.progress import exit_if_interrupted, with_progress
from service.cli.support import fail, freeze_start_up, out, user_errors

if TYPE_CHECKING:
    from crawler.remote import RemoteWorkQueue
    from crawler.worker import CrawlStats

__all__ = ["worker"]


@user_errors
def worker(
    api: Annotated[str, typer.Option("--api", help="The worker API's base URL (crawlplan serve).")],
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Bearer token (default: the first of api.tokens, e.g. $CRAWLPLAN_API_TOKENS).",
            show_default=False,
        ),
    ] = None,
    workers: WorkersOption = None,
    name: Annotated[
        str,
        typer.Option(
            "--name",
            help="This pool's name: workers are NAME-PID-0, NAME-PID-1, ... (PID: this "
            "process's id, so that names are unique per machine and process).",
        ),
    ] = socket.gethostname(),
    seconds: SecondsOption = None,
    until_idle: UntilIdleOption = False,
    allow_private: AllowPrivateOption = False,
    config: ConfigOption = None,
) -> None:
    """A remote worker pool: lease from the worker API, crawl politely, report over HTTP.

    Needs no database credentials: only the API's URL and a token. If the server goes away,
    calls are retried for two minutes, so a restart loses nothing. Stops cleanly on Ctrl-C
    (exit 130) or SIGTERM (exit 143).
    """
    from crawler.remote import RemoteQueueError, RemoteWorkQueue
    from crawler.worker import run_workers
    from service.config import load_settings
    from service.crawl_progress import progress_line

    settings = load_settings({}, config_file=config)
    secret = token or next(iter(settings.api_tokens), None)
    if not secret:
        raise fail("pass --token or set $CRAWLPLAN_API_TOKENS (the server's bearer token)")
    if not api.startswith(("http://", "https://")):
        raise fail(f"--api must be an http:// or https:// URL, got {api!r}")
    probe = RemoteWorkQueue(api, secret, f"{name}-probe", retry_seconds=0.0)
    try:
        probe.policy  # noqa: B018 (checks the URL and the token before starting)
    except RemoteQueueError as error:
        raise fail(str(error)) from None
    crawl_settings = settings.crawl_settings(allow_private=allow_private)

    def queue() -> RemoteWorkQueue:
        return RemoteWorkQueue(api, secret)

    def run(stop: threading.Event, stats: CrawlStats) -> CrawlStats:
        return run_workers(
            queue,
            crawl_settings,
            workers=workers or int(settings.values["crawl.workers"]),
            until_idle=until_idle,
            seconds=seconds,
            stop=stop,
            stats=stats,
            name_prefix=f"{name}-{os.getpid()}",
        )

    freeze_start_up()
    signals: list[int] = []
    stats = with_progress(run, signals=signals)
    out.print(progress_line(stats).replace(", hosts active 0", ""))
    exit_if_interrupted(signals)

"""``crawlplan crawl``: a local worker pool that leases from the store, crawls and reports."""

from __future__ import annotations

from service.cli.options import (
    AllowPrivateOption,
    ConfigOption,
    DbOption,
    ProcessesOption,
    SecondsOption,
    UntilIdleOption,
    WorkersOption,
)
from service.cli.progress import crawl_with_progress, exit_if_interrupted
from service.cli.support import open_checked, out, settings_from, user_errors

__all__ = ["crawl"]


@user_errors
def crawl(
    workers: WorkersOption = None,
    processes: ProcessesOption = None,
    seconds: SecondsOption = None,
    until_idle: UntilIdleOption = False,
    allow_private: AllowPrivateOption = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Crawl: lease due URLs, fetch them politely, report what changed, discover new pages.

    Runs until interrupted (Ctrl-C or SIGTERM: in-flight fetches finish and are reported,
    leases are released, and the exit code is 130 for Ctrl-C, 143 for SIGTERM), until
    --seconds, or with --until-idle until nothing is due (exit 0).
    """
    from service.crawl_progress import progress_line

    settings = settings_from(db, config)
    database = open_checked(settings)
    signals: list[int] = []
    stats = crawl_with_progress(
        database,
        settings,
        settings.crawl_settings(allow_private=allow_private),
        workers=workers or int(settings.values["crawl.workers"]),
        until_idle=until_idle,
        seconds=seconds,
        processes=processes or int(settings.values["crawl.processes"]),
        signals=signals,
    )
    out.print(progress_line(stats).replace(", hosts active 0", ""))
    exit_if_interrupted(signals)

"""``crawlplan seed``: add URLs to crawl, from arguments, a file or standard input.

Each URL is normalized and stored once; malformed lines are listed (and written to
``--rejects FILE``), the good ones stored all the same, and the exit code is 1. A file is
read as bytes, a line at a time up to :data:`crawler.seeds.MAX_LINE_BYTES`: a longer line,
or one that is not UTF-8, is rejected and said so, quoted cut short.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from service.cli.options import ConfigOption, DbOption
from service.cli.support import err, fail, open_checked, out, settings_from, user_errors

if TYPE_CHECKING:
    from crawler.seeds import RejectedURL, SeedReader

__all__ = ["seed"]

UrlsArgument = Annotated[list[str] | None, typer.Argument(help="URLs to add.", show_default=False)]
FileOption = Annotated[
    Path | None,
    typer.Option(
        "--file",
        "-f",
        help="File of URLs, one per line ('#' comments and blank lines are skipped; "
        "'-' reads standard input).",
        show_default=False,
    ),
]
RejectsOption = Annotated[
    Path | None,
    typer.Option(
        "--rejects",
        help="Write every rejected line (line number, text, reason) to this TSV file.",
        show_default=False,
    ),
]
NowOption = Annotated[
    bool,
    typer.Option(
        "--now",
        help="Crawl these URLs ahead of the plan (the immediate-crawl lane), still "
        "politely; they count against the next period's capacity.",
    ),
]


@user_errors
def seed(
    urls: UrlsArgument = None,
    file: FileOption = None,
    rejects: RejectsOption = None,
    now: NowOption = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Add URLs to crawl. Each URL is normalized and stored once; malformed ones are listed.

    Exits 1 when some lines were rejected (the good ones are stored all the same).
    """
    from crawler.seeds import SeedReader
    from service.files import open_binary_input
    from store import add_pages
    from store.urgent import request_urgent

    if not urls and file is None:
        raise fail("nothing to seed: pass URLs as arguments or --file FILE")
    database = open_checked(settings_from(db, config))
    with ExitStack() as stack:
        reader = SeedReader(on_reject=_reject_writer(stack, rejects))
        lines = _located("argument", urls or [])
        if file is not None:
            lines = itertools.chain(lines, reader.lines(open_binary_input(stack, file)))
        pairs = _counted(stack, reader.pairs(lines))
        if now:
            urgent = request_urgent(database, list(pairs), source="cli")
        else:
            outcome = add_pages(database, pairs)
    if now:
        out.print(
            f"queued {urgent.queued:,} pages ahead of the plan ({urgent.added:,} new to the "
            f"store; {urgent.leased:,} already leased, crawled soon)"
        )
    else:
        out.print(
            f"seeded {outcome.added:,} new pages on {outcome.hosts_added:,} new hosts "
            f"({outcome.known:,} already known)"
        )
    if reader.rejected_count:
        _report_rejects(reader, rejects)
        raise typer.Exit(1)


def _located(label: str, lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``("line 3", text)`` for each line: where a rejected URL came from."""
    for number, line in enumerate(lines, start=1):
        yield f"{label} {number}", line


def _reject_writer(stack: ExitStack, path: Path | None) -> Callable[[RejectedURL], None]:
    """A callback that writes each rejected line to the TSV file ``path`` (or drops it)."""
    if path is None:
        return lambda _rejected: None
    try:
        handle: TextIO = stack.enter_context(path.open("w", encoding="utf-8"))
    except OSError as error:
        from service.errors import InputFileError

        raise InputFileError(f"cannot write {path}: {error.strerror}") from None
    handle.write("where\ttext\treason\n")

    def write(r: RejectedURL) -> None:
        handle.write(f"{r.where}\t{r.text}\t{r.reason}\n")

    return write


def _counted(stack: ExitStack, pairs: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """``pairs`` unchanged, with a progress bar on a terminal (every 10,000 URLs)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    progress = stack.enter_context(
        Progress(
            TextColumn("seeding"),
            BarColumn(bar_width=None),
            TextColumn("{task.completed:,} URLs"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        )
    )
    task = progress.add_task("seed", total=None)
    for i, pair in enumerate(pairs, start=1):
        if i % 10_000 == 0:
            progress.update(task, completed=i)
        yield pair


def _report_rejects(reader: SeedReader, rejects: Path | None) -> None:
    """List the first rejected lines on stderr and end with one ``error:`` line."""
    for r in reader.rejected:
        err.print(f"  rejected {r.where}: {r.reason}", markup=False)
    more = reader.rejected_count - len(reader.rejected)
    if more:
        hint = f" (all in {rejects})" if rejects else "; pass --rejects FILE to list them all"
        err.print(f"  ... and {more:,} more{hint}", markup=False)
    err.print(
        f"error: {reader.rejected_count:,} malformed URLs were not seeded (listed above); "
        "fix them and seed again",
        markup=False,
    )

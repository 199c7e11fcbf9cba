"""``crawlplan estimate``: each page's change rate, its interval, estimator and bucket.

File in, file out (``--observations`` CSV/Parquet to ``--out``), or the whole store in chunks.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.options import ConfigOption, DbOption
from service.cli.support import err, fail, open_checked, out, settings_from, user_errors

if TYPE_CHECKING:
    from service.config import Settings

__all__ = ["estimate"]


@user_errors
def estimate(
    observations: Annotated[
        Path | None,
        typer.Option(
            "--observations",
            "-i",
            help="CSV or Parquet, one row per fetch: page, fetched_at (ISO-8601 or days), "
            "changed (1/0, empty on a page's first fetch), optional last_modified, host. "
            "Without it, every page of the store is re-estimated from its observations.",
            show_default=False,
        ),
    ] = None,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="CSV or Parquet, one row per page.", show_default=False),
    ] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Estimate each page's change rate (per day), its interval, estimator and bucket.

    With --observations and --out: file in, file out; bad rows are reported with their line
    numbers and the rest is estimated (exit code 1). Without them: the store's pages are
    re-estimated from their observations, in chunks, and the estimates written back.
    """
    settings = settings_from(db, config)
    if observations is None:
        if out_file is not None:
            raise fail("--out needs --observations; without them the store is estimated")
        _estimate_store(settings)
        return
    if out_file is None:
        raise fail("--observations needs --out FILE (.csv or .parquet)")
    _estimate_file(settings, observations, out_file)


def _estimate_store(settings: Settings) -> None:
    """Re-estimate every page of the store from its observations and write the estimates."""
    from service.pipeline import estimate_from_store

    database = open_checked(settings)
    summary = estimate_from_store(
        database, scale=settings.bucket_scale, policy=settings.last_modified_policy
    )
    out.print(
        f"estimated {summary.pages:,} pages from {summary.fetches:,} fetches "
        f"({', '.join(f'{k} {v:,}' for k, v in sorted(summary.by_estimator.items()))}); "
        f"rates and buckets written to {database.display_url}",
        markup=False,
    )


def _estimate_file(settings: Settings, observations: Path, out_file: Path) -> None:
    """Estimate the pages of an observations file; exit 1 after listing any bad rows."""
    from estimators.fetch_table import estimate_fetch_table
    from service.errors import InputFileError
    from service.files import read_table, write_table
    from store.types import utcnow

    table = read_table(observations)
    missing = [c for c in ("page", "fetched_at", "changed") if c not in table.columns]
    if missing:
        raise InputFileError(
            f"{observations}: missing column(s) {', '.join(missing)}; "
            "expected page, fetched_at, changed and optionally last_modified, host"
        )
    result = estimate_fetch_table(
        table,
        now=utcnow(),
        first_line=2 if observations.suffix.lower() == ".csv" else 1,
        scale=settings.bucket_scale,
        policy=settings.last_modified_policy,
    )
    write_table(result.rates, out_file)
    counts = result.rates["estimator"].value_counts().to_dict()
    out.print(
        f"estimated {len(result.rates):,} pages from {len(table):,} fetches "
        f"({', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()))}); "
        f"written to {out_file}",
        markup=False,
    )
    for problem in result.problems:
        err.print(f"  {problem.message}", markup=False)
    if result.problems:
        err.print(
            f"error: {len(result.problems)} kind(s) of bad rows in {observations} "
            "(listed above); the other rows were estimated",
            markup=False,
        )
        raise typer.Exit(1)

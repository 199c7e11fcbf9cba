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
    import pandas as pd

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
            "changed (1/0, empty on a page's first fetch), optional last_modified, host, "
            "change_size (the share of the text that changed, 0-1: needed with "
            "estimate.min_change). "
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
    min_change = float(settings.values["estimate.min_change"])
    summary = estimate_from_store(
        database,
        scale=settings.bucket_scale,
        policy=settings.last_modified_policy,
        min_change=min_change,
    )
    out.print(
        f"estimated {summary.pages:,} pages from {summary.fetches:,} fetches "
        f"({', '.join(f'{k} {v:,}' for k, v in sorted(summary.by_estimator.items()))}); "
        f"rates and buckets written to {database.display_url}",
        markup=False,
    )
    if min_change > 0:
        out.print(
            f"{summary.small_changes:,} changes below estimate.min_change = {min_change:g} "
            "of the text counted as none; Last-Modified dates not read",
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
    min_change = float(settings.values["estimate.min_change"])
    if min_change > 0:
        table = _small_changes_as_none(table, min_change, observations)
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


def _small_changes_as_none(table: pd.DataFrame, min_change: float, path: Path) -> pd.DataFrame:
    """The table with changes below ``min_change`` (its ``change_size`` column, a share of
    the text, 0-1; empty: unknown, still a change) as no change and no Last-Modified dates:
    ``estimate.min_change`` as the store's estimate reads it."""
    import pandas as pd

    from service.errors import InputFileError

    if "change_size" not in table.columns:
        raise InputFileError(
            f"{path}: estimate.min_change is {min_change:g} but there is no change_size "
            "column (each change's share of the text, 0-1); add it or set "
            "estimate.min_change = 0"
        )
    raw = table["change_size"]
    size = pd.to_numeric(raw, errors="coerce")
    given = raw.notna() & (raw.astype(str).str.strip() != "")
    bad = given & ~size.between(0, 1)
    if bad.any():
        at = int(bad.to_numpy().nonzero()[0][0])
        line = at + (2 if path.suffix.lower() == ".csv" else 1)
        raise InputFileError(
            f"{path}, line {line}: change_size {raw.iloc[at]!r} is not a share from 0 to 1 "
            f"({int(bad.sum())} such row(s)); leave it empty where the size is unknown"
        )
    small = (pd.to_numeric(table["changed"], errors="coerce") == 1) & (size < min_change)
    table = table.drop(columns=["last_modified"], errors="ignore")
    table["changed"] = table["changed"].astype(object).where(~small, 0)
    return table

"""``crawlplan status``: pages by status and by bucket, hosts, leases and the current plan."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from service.cli.options import ConfigOption, DbOption
from service.cli.support import counted, open_checked, out, settings_from, user_errors

if TYPE_CHECKING:
    from store import Database
    from store.status import StoreStatus

__all__ = ["status"]


@user_errors
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Show pages by status and by change-rate bucket, unfetchable pages (robots.txt), hosts
    given up (robots.txt unreachable), duplicates (a directory's index file), probes, leases
    and the current plan."""
    from store import read_status

    database = open_checked(settings_from(db, config))
    st = read_status(database)
    if as_json:
        found = asdict(st)
        if st.plan is not None:
            found["periods"] = _period_use_json(database, st.plan.version)
        out.print_json(json.dumps(found, default=str))
        return
    out.print(f"store    {database.display_url}")
    out.print(
        f"pages    {st.pages:,} on {st.hosts:,} hosts; {st.due_now:,} due now, "
        f"{st.leased_now:,} leased in {st.active_leases:,} active leases"
    )
    out.print(f"seen     {counted(st.observations, 'observation')} (fetches and notifications)")
    out.print(f"unfetchable {_unfetchable(st)}")
    out.print(f"given up {_given_up(st)}")
    out.print(f"duplicate {_duplicates(st)}")
    out.print(f"noise    {_noise(st)}")
    out.print(f"probes   {_probes(st)}")
    out.print(_status_table(st))
    out.print(_bucket_table(st))
    if st.plan is None:
        out.print("plan     none published yet")
    else:
        p = st.plan
        out.print(
            f"plan     version {p.version}, published {p.published_at:%Y-%m-%d %H:%M}Z, "
            f"{p.strategy}, {counted(p.periods, 'period')} of {counted(p.period_days, 'day')}, "
            f"{p.total_quota:,} refresh + {p.total_new_pages:,} new pages"
        )
        out.print(_capacity_table(database, p.version))


#: How ``crawlplan status`` words each reason a page can't be fetched.
_REASONS = {"robots": "disallowed by robots.txt"}


def _unfetchable(st: StoreStatus) -> str:
    """The pages that can't be fetched, by reason: no candidates, in no bucket."""
    total = sum(st.unfetchable.values())
    reasons = ", ".join(f"{n:,} {_REASONS.get(why, why)}" for why, n in st.unfetchable.items() if n)
    text = f"{counted(total, 'page')}, never released"
    return f"{text} ({reasons})" if reasons else text


def _given_up(st: StoreStatus) -> str:
    """The hosts the crawl gave up (robots.txt unreachable too many times in a row) and their
    pages, which are not crawled until a user seeds a URL of theirs again."""
    text = f"{counted(st.given_up_hosts, 'host')} (robots.txt unreachable)"
    if not st.given_up_hosts:
        return text
    return f"{text}, {counted(st.given_up_pages, 'page')} not crawled; seed a URL to try again"


def _noise(st: StoreStatus) -> str:
    """The hosts whose per-request noise a twin fetch checked, and those it found noise on
    (its elements are left out of their pages' signatures)."""
    text = f"{counted(st.noise_checked_hosts, 'host')} checked by a twin fetch"
    if not st.noisy_hosts:
        return text
    return f"{text}, {st.noisy_hosts:,} with noise rules (left out of signatures)"


def _probes(st: StoreStatus) -> str:
    """The pages marked for a probe (two crawls a short delay apart, to learn their change
    rate): those waiting for its first crawl, those marked for a follow-up (a probe whose
    first crawl is the page's next planned one), and those waiting for the second."""
    return (
        f"{counted(st.probes_marked, 'page')} to probe, "
        f"{st.follow_ups_marked:,} to follow up, "
        f"{st.probes_pending:,} waiting for the second crawl"
    )


def _duplicates(st: StoreStatus) -> str:
    """The index files that answered as their directory URL does: one document, crawled
    under the directory's URL alone."""
    text = f"{counted(st.duplicates, 'page')}, never released"
    if not st.duplicates:
        return text
    return f"{text} (index files of directory URLs that serve the same document)"


def _status_table(st: StoreStatus) -> Table:
    table = Table(title="pages by status", title_justify="left", show_edge=False)
    table.add_column("status")
    table.add_column("pages", justify="right")
    for name, count in sorted(st.by_status.items()):
        table.add_row(name, f"{count:,}")
    return table


def _bucket_table(st: StoreStatus) -> Table:
    table = Table(title="pages by change-rate bucket", title_justify="left", show_edge=False)
    table.add_column("bucket")
    table.add_column("pages", justify="right")
    for bucket, count in st.by_bucket.items():
        table.add_row("0 (no estimate yet)" if bucket == 0 else str(bucket), f"{count:,}")
    return table


def _dash(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _capacity_table(database: Database, plan: int) -> Table:
    """Per begun period of the plan: capacity, released, fetched, pending, idle."""
    from store.period_use import plan_period_use

    table = Table(
        title=f"capacity use by period of plan {plan}, in crawls (fetched: requests made; "
        "blocked: by robots.txt; idle: capacity - fetched)",
        title_justify="left",
        box=None,
        padding=(0, 0, 0, 1),
        show_edge=False,
    )
    names = ("period", "capacity", "released", "re-crawls", "new", "fetched", "failed")
    for name in (*names, "blocked", "pending", "idle"):
        table.add_column(name, justify="right", no_wrap=True)
    for use in plan_period_use(database, plan):
        table.add_row(
            str(use.period),
            _dash(use.capacity),
            _dash(use.released),
            _dash(use.recrawls),
            _dash(use.new_pages),
            _dash(use.fetched),
            _dash(use.failed),
            _dash(use.blocked),
            _dash(use.pending),
            "running" if use.idle is None else _dash(use.idle),
        )
    return table


def _period_use_json(database: Database, plan: int) -> list[dict[str, object]]:
    from store.period_use import plan_period_use

    return [
        {**asdict(use), "recrawls": use.recrawls, "pending": use.pending, "idle": use.idle}
        for use in plan_period_use(database, plan)
    ]

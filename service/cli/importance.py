"""``crawlplan importance``: an edges file in, OPIC importance beside reference PageRank out.

Service edge: reads the edges (CSV or Parquet, columns ``src,dst``, page names as text or
integers), runs OPIC (:mod:`estimators.opic`) for ``--visits`` page crawls chosen by a selection
strategy, computes PageRank by power iteration on the same graph, writes
``page,importance,pagerank`` and prints a convergence summary. Self-loops and duplicate edges
are dropped with a warning; anything else wrong with the input is one ``error:`` line, exit 2.
"""

from __future__ import annotations

import fnmatch
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer

from service.cli.support import err, fail, out

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from estimators.opic_graph import LinkGraph
    from estimators.opic_windows import HistoryWindow

__all__ = ["importance"]

#: ``estimators.opic.DEFAULT_DAMPING``, written here for the option's default so that the CLI
#: starts without numpy (tests/test_cli_startup.py checks that the two agree).
DEFAULT_DAMPING = 0.85


def _number(option: str, text: str, kind: type[int] | type[float], rule: str) -> float:
    try:
        value = kind(text.replace("_", ""))
    except ValueError:
        raise fail(f"{option} must be {rule}, got {text!r}") from None
    if not math.isfinite(value):
        raise fail(f"{option} must be {rule}, got {text!r}")
    return value


def _names(table: pd.DataFrame, column: str, path: Path) -> pd.Series:
    import numpy as np

    from service.errors import InputFileError

    values = table[column]
    missing = values.isna() | (values.astype(str).str.strip() == "")
    if missing.any():
        row = int(np.flatnonzero(missing.to_numpy())[0]) + 2  # + header, 1-based
        raise InputFileError(f"{path}: row {row} has an empty {column}; every edge needs both ends")
    return values.astype(str).str.strip()


def _read_edges(path: Path, pages_file: Path | None) -> tuple[LinkGraph, pd.Index, int]:
    import pandas as pd

    from estimators.opic_graph import GraphError, LinkGraph
    from service.errors import InputFileError
    from service.files import read_table

    table = read_table(path)
    missing = [c for c in ("src", "dst") if c not in table.columns]
    if missing:
        raise InputFileError(
            f"{path}: missing column(s) {', '.join(missing)}; the edges need columns src,dst "
            f"(found: {', '.join(map(str, table.columns)) or 'none'})"
        )
    src, dst = _names(table, "src", path), _names(table, "dst", path)
    if pages_file is not None:
        listed = read_table(pages_file)
        if "page" not in listed.columns:
            raise InputFileError(f"{pages_file}: missing column page")
        names = pd.Index(_names(listed, "page", pages_file).unique())
        unknown = pd.Index(pd.concat([src, dst]).unique()).difference(names)
        if len(unknown):
            shown = ", ".join(repr(p) for p in unknown[:3])
            raise InputFileError(
                f"{path}: {len(unknown)} page(s) not in {pages_file} (first: {shown}); "
                "add them to the pages file or drop those edges"
            )
    else:
        names = pd.Index(pd.concat([src, dst]).unique())
    if len(table) == 0 or len(names) == 0:
        raise InputFileError(f"{path}: no edges; the graph is empty, give at least one src,dst row")
    try:
        graph = LinkGraph.from_edges(names.get_indexer(src), names.get_indexer(dst), len(names))
    except GraphError as error:
        raise InputFileError(f"{path}: {error}") from None
    return graph, names, len(table)


def _window(size: str | None, measures: str | None) -> HistoryWindow | None:
    from estimators.opic_windows import InterpolationWindow, VariableWindow

    if size is not None and measures is not None:
        raise fail("pass --window (units of G) or --window-measures (a count), not both")
    if size is not None:
        value = _number("--window", size, float, "a number > 0 (units of G)")
        if value <= 0:
            raise fail(f"--window must be a number > 0 (units of G), got {size!r}")
        return InterpolationWindow(value)
    if measures is not None:
        count = int(_number("--window-measures", measures, int, "an integer >= 1"))
        if count < 1:
            raise fail(f"--window-measures must be an integer >= 1, got {measures!r}")
        return VariableWindow(count)
    return None


# The command's options, declared once each, so that its signature reads at a glance.
GraphFileOption = Annotated[
    Path | None,
    typer.Option(
        "--graph",
        "-g",
        help="CSV or Parquet edges: columns src,dst (page names, text or integers).",
        show_default=False,
    ),
]
StrategyOption = Annotated[
    str, typer.Option("--strategy", help="Page selection: greedy, random or cycle.")
]
VisitsOption = Annotated[
    str | None,
    typer.Option(
        "--visits",
        "-n",
        help="Page crawls to simulate (an integer >= 1; 10 x the pages is a good start).",
        show_default=False,
    ),
]
WindowOption = Annotated[
    str | None,
    typer.Option(
        "--window",
        help="Adaptive OPIC: Interpolation window in units of G (about one per crawl of "
        "every page). Default: the whole history.",
        show_default=False,
    ),
]
WindowMeasuresOption = Annotated[
    str | None,
    typer.Option(
        "--window-measures",
        help="Adaptive OPIC: a Variable Window of this many measures per page.",
        show_default=False,
    ),
]
DampingOption = Annotated[
    str, typer.Option("--damping", help="Share of a page's cash its links carry, in [0, 1].")
]
SeedOption = Annotated[str, typer.Option("--seed", help="Seed of Random and Cycle.")]
BatchOption = Annotated[
    str | None,
    typer.Option(
        "--batch",
        help="Pages crawled per step (default: 1 % of the pages, at least 1).",
        show_default=False,
    ),
]
InterestOption = Annotated[
    str | None,
    typer.Option(
        "--interest",
        help="Bias the cash toward pages whose name matches this glob (* any run, ? one "
        "character); total cash is conserved.",
        show_default=False,
    ),
]
BoostOption = Annotated[
    str, typer.Option("--boost", help="With --interest: weight of a matching page, > 0.")
]
PagesFileOption = Annotated[
    Path | None,
    typer.Option(
        "--pages",
        help="Optional CSV or Parquet with a page column: every page of the graph, "
        "including pages without links. Edges naming other pages are an error.",
        show_default=False,
    ),
]
OutFileOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="CSV or Parquet: page, importance (OPIC), pagerank (reference); most important first.",
        show_default=False,
    ),
]


def importance(
    graph_file: GraphFileOption = None,
    strategy: StrategyOption = "greedy",
    visits: VisitsOption = None,
    window: WindowOption = None,
    window_measures: WindowMeasuresOption = None,
    damping: DampingOption = str(DEFAULT_DAMPING),
    seed: SeedOption = "0",
    batch: BatchOption = None,
    interest: InterestOption = None,
    boost: BoostOption = "10",
    pages_file: PagesFileOption = None,
    out_file: OutFileOption = None,
) -> None:
    """On-line page importance (OPIC) of every page of a link graph, beside PageRank.

    Simulates a crawl of the graph: each visited page gives its cash to its links (the virtual
    page takes the rest and spreads it), and importance is read from the cash history. Prints
    how close it came to the PageRank fixpoint with the same damping.
    """
    from estimators.opic_selection import STRATEGIES

    if graph_file is None or visits is None or out_file is None:
        raise fail("pass --graph EDGES, --visits N and --out FILE (.csv or .parquet)")
    if strategy not in STRATEGIES:
        raise fail(f"unknown --strategy {strategy!r}: choose one of greedy, random, cycle")
    n_visits = int(_number("--visits", visits, int, "an integer >= 1 (page crawls)"))
    if n_visits < 1:
        raise fail(f"--visits must be an integer >= 1 (page crawls), got {visits!r}")
    d = _number("--damping", damping, float, "a number in [0, 1]")
    if not 0.0 <= d <= 1.0:
        raise fail(f"--damping must be a number in [0, 1], got {damping!r}")
    seed_value = int(_number("--seed", seed, int, "an integer"))
    history_window = _window(window, window_measures)
    boost_value = _number("--boost", boost, float, "a number > 0")
    if boost_value <= 0:
        raise fail(f"--boost must be a number > 0, got {boost!r}")
    if out_file.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise fail(f"{out_file}: the output must end in .csv or .parquet")

    graph, names, n_edges = _read_edges(graph_file, pages_file)
    if graph.self_loops_dropped or graph.duplicates_dropped:
        err.print(
            f"warning: {graph_file}: dropped {graph.self_loops_dropped} self-loop(s) and "
            f"{graph.duplicates_dropped} duplicate edge(s): a link counts once, and a page's "
            "cash never flows back to itself",
            markup=False,
        )
    weights = None if interest is None else _interest(names, interest, boost_value)
    if batch is None:
        step = max(1, math.ceil(graph.n_pages / 100))
    else:
        step = int(_number("--batch", batch, int, "an integer >= 1"))
        if step < 1:
            raise fail(f"--batch must be an integer >= 1, got {batch!r}")
    _run(
        graph,
        names,
        _Run(strategy, seed_value, n_visits, step, d, history_window, weights),
        out_file,
        f"{n_edges:,} edge rows",
    )


class _Run(NamedTuple):
    """One OPIC run's settings, checked: selection, visits, batch, damping, window, bias."""

    strategy: str
    seed: int
    visits: int
    step: int
    damping: float
    window: HistoryWindow | None
    weights: np.ndarray | None


def _interest(names: pd.Index, interest: str, boost: float) -> np.ndarray:
    """Per page, shape (n_pages,): ``boost`` for names matching the glob, else 1 (normalized
    by :func:`estimators.opic.interest_weights` so that total cash is conserved)."""
    import numpy as np

    from estimators.opic import interest_weights

    pattern = re.compile(fnmatch.translate(interest))
    mask = np.array([bool(pattern.match(name)) for name in names])
    if not mask.any():
        err.print(f"warning: --interest {interest!r} matches no page; no bias", markup=False)
    return interest_weights(mask, boost=boost)


def _run(graph: LinkGraph, names: pd.Index, run: _Run, out_file: Path, edges: str) -> None:
    """Run OPIC and PageRank on ``graph``, write both per page and print how close they are."""
    import numpy as np
    import pandas as pd

    from estimators.opic import OPIC
    from estimators.opic_selection import STRATEGIES, PageSelection
    from estimators.pagerank import pagerank
    from service.files import write_table

    n = graph.n_pages
    selection: PageSelection = (
        STRATEGIES["greedy"]()
        if run.strategy == "greedy"
        else STRATEGIES[run.strategy](seed=run.seed)
    )
    opic = OPIC(damping=run.damping, window=run.window, interest=run.weights).start(n)
    while opic.state_.crawls < run.visits:
        size = min(run.step, run.visits - opic.state_.crawls)
        opic.crawl(graph, selection.select(opic.state_.cash[:n], size))
    estimate = opic.importance()
    reference = pagerank(graph, damping=run.damping, interest=run.weights)

    table = pd.DataFrame(
        {"page": names.to_numpy(), "importance": estimate, "pagerank": reference.scores}
    ).sort_values("importance", ascending=False, kind="stable")
    write_table(table, out_file)

    relative = np.abs(estimate - reference.scores) / reference.scores
    top = np.argsort(-reference.scores, kind="stable")[: max(1, n // 10)]
    out.print(
        f"importance: {n:,} pages, {graph.n_links:,} links ({edges}), "
        f"{opic.state_.crawls:,} visits ({opic.state_.crawls / n:.1f} x N) by {run.strategy}"
        f"{'' if run.window is None else ', ' + _describe(run.window)}; "
        f"G = {opic.state_.clock:.3g}; total cash {opic.total_cash():.17g}",
        markup=False,
    )
    out.print(
        f"error vs PageRank (damping {run.damping:g}, {reference.iterations} iterations, "
        f"residual {reference.residual:.1e}): mean relative {_percent(relative.mean())}, top "
        f"10 % {_percent(relative[top].mean())}, max {_percent(relative.max())}, "
        f"L1 {np.abs(estimate - reference.scores).sum():.2e}; wrote {out_file}",
        markup=False,
    )


def _percent(value: float) -> str:
    return f"{100 * value:.3g} %"


def _describe(window: HistoryWindow) -> str:
    from estimators.opic_windows import InterpolationWindow, VariableWindow

    if isinstance(window, InterpolationWindow):
        return f"Interpolation window {window.size:g} G"
    if isinstance(window, VariableWindow):
        return f"Variable Window {window.measures} measures"
    return "full history"

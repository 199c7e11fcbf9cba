"""``crawlplan importance``: an edges file in, OPIC importance beside PageRank out.

The command is run through a Typer app of its own (the same wrapper ``service.cli.app`` registers
it with), in-process with CliRunner.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from service.cli.importance import importance
from service.cli.support import user_errors

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command()(user_errors(importance))
app.command("noop")(lambda: None)  # two commands: the app keeps the `importance` name

EDGES = [
    ("home", "news"),
    ("home", "about"),
    ("news", "home"),
    ("news", "story-1"),
    ("news", "story-2"),
    ("story-1", "home"),
    ("story-2", "news"),
    ("about", "home"),
    ("story-1", "story-2"),
]


def _edges(path: Path, rows: list[tuple[object, object]] = EDGES) -> Path:
    table = pd.DataFrame(rows, columns=["src", "dst"])
    if path.suffix == ".csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)
    return path


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["importance", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_importance_writes_opic_beside_pagerank_and_a_summary(tmp_path: Path, suffix: str) -> None:
    edges = _edges(tmp_path / f"edges{suffix}")
    out = tmp_path / f"importance{suffix}"
    code, stdout, stderr = _run(
        "--graph", str(edges), "--strategy", "greedy", "--visits", "20000", "--out", str(out)
    )
    assert code == 0, stderr
    table = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    assert list(table.columns) == ["page", "importance", "pagerank"]
    assert set(table["page"]) == {"home", "news", "about", "story-1", "story-2"}
    assert table["importance"].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(table["importance"], table["pagerank"], rtol=1e-3)
    assert table["page"].iloc[0] == "home"  # most important first
    assert "5 pages, 9 links" in stdout and "by greedy" in stdout
    assert "mean relative" in stdout and "top 10 %" in stdout
    assert "total cash 1\n" in stdout


def test_integer_pages_windows_and_interest(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    rows = [(int(a), int(b)) for a, b in rng.integers(0, 40, size=(200, 2))]
    edges = _edges(tmp_path / "edges.parquet", rows)
    for extra in (["--window", "4"], ["--window-measures", "8"], ["--interest", "1*"]):
        out = tmp_path / "out.csv"
        code, stdout, stderr = _run(
            "--graph",
            str(edges),
            "--strategy",
            "cycle",
            "--visits",
            "4000",
            "--out",
            str(out),
            "--damping",
            "0.9",
            "--seed",
            "3",
            *extra,
        )
        assert code == 0, stderr
        table = pd.read_csv(out)
        assert table["importance"].sum() == pytest.approx(1.0)
    assert "Variable Window 8 measures" not in stdout  # the last run had no window
    # Self-loops and duplicates in random edges: defined behaviour, and said on stderr.
    assert "warning:" in stderr and "self-loop" in stderr and "duplicate edge" in stderr


def test_unknown_pages_need_the_pages_file(tmp_path: Path) -> None:
    edges = _edges(tmp_path / "edges.csv")
    pages = tmp_path / "pages.csv"
    pd.DataFrame({"page": ["home", "news", "about", "story-1", "lonely"]}).to_csv(pages)
    code, _, stderr = _run(
        "--graph",
        str(edges),
        "--visits",
        "100",
        "--pages",
        str(pages),
        "--out",
        str(tmp_path / "o.csv"),
    )
    assert code == 2
    assert stderr.strip() == (
        f"error: {edges}: 1 page(s) not in {pages} (first: 'story-2'); add them to the pages "
        "file or drop those edges"
    )
    pd.DataFrame({"page": ["home", "news", "about", "story-1", "story-2", "lonely"]}).to_csv(pages)
    out = tmp_path / "o.csv"
    code, _, stderr = _run(
        "--graph", str(edges), "--visits", "3000", "--pages", str(pages), "--out", str(out)
    )
    assert code == 0, stderr
    assert "lonely" in set(pd.read_csv(out)["page"])  # a page without links still has importance


@pytest.mark.parametrize(
    ("rows", "args", "message"),
    [
        (None, ["--visits", "ten"], "--visits must be an integer >= 1 (page crawls), got 'ten'"),
        (None, ["--visits", "0"], "--visits must be an integer >= 1"),
        (None, ["--visits", "9", "--damping", "1.5"], "--damping must be a number in [0, 1]"),
        (None, ["--visits", "9", "--strategy", "best"], "unknown --strategy 'best'"),
        (None, ["--visits", "9", "--window", "-1"], "--window must be a number > 0"),
        (None, ["--visits", "9", "--window", "2", "--window-measures", "3"], "not both"),
        ([], ["--visits", "9"], "no edges; the graph is empty"),
        ([("a", None)], ["--visits", "9"], "row 2 has an empty dst"),
    ],
)
def test_bad_input_is_one_error_line(
    tmp_path: Path, rows: list[tuple[object, object]] | None, args: list[str], message: str
) -> None:
    edges = _edges(tmp_path / "edges.csv", EDGES if rows is None else rows)
    code, stdout, stderr = _run("--graph", str(edges), "--out", str(tmp_path / "o.csv"), *args)
    assert code == 2
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert message in stderr
    assert "Traceback" not in stderr + stdout


def test_missing_file_and_missing_columns(tmp_path: Path) -> None:
    code, _, stderr = _run(
        "--graph", str(tmp_path / "none.csv"), "--visits", "9", "--out", str(tmp_path / "o.csv")
    )
    assert code == 2 and stderr == f"error: {tmp_path / 'none.csv'} does not exist\n"
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"from": ["a"], "dst": ["b"]}).to_csv(bad, index=False)
    code, _, stderr = _run("--graph", str(bad), "--visits", "9", "--out", str(tmp_path / "o.csv"))
    assert code == 2
    assert "missing column(s) src; the edges need columns src,dst (found: from, dst)" in stderr

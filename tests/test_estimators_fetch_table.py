"""The fetch-table function behind ``crawlplan estimate --observations``: bad input by line."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from estimators import estimate_fetch_table
from estimators.fetch_table import OUTPUT_COLUMNS, estimate_fetch_arrays

NOW = datetime(2026, 1, 10, tzinfo=UTC)


def _table(rows: list[tuple[object, ...]], lm: bool = False) -> pd.DataFrame:
    columns = ["page", "fetched_at", "changed"] + (["last_modified"] if lm else [])
    return pd.DataFrame(rows, columns=columns)


def _kinds(result) -> dict[str, tuple[int, ...]]:
    return {p.kind: p.lines for p in result.problems}


def test_clean_table_one_row_per_page() -> None:
    rows = [("a", f"2026-01-0{d}T00:00:00Z", "" if d == 1 else d % 2) for d in range(1, 9)]
    rows += [("b", 20454.0 + d, "" if d == 0 else 0) for d in range(4)]
    result = estimate_fetch_table(_table(rows), now=NOW)
    assert result.problems == ()
    assert list(result.rates.columns) == list(OUTPUT_COLUMNS)
    assert result.rates["page"].tolist() == ["a", "b"]
    assert result.rates["fetches"].tolist() == [8, 4]
    assert (result.rates["bucket"] > 0).all()
    assert (result.rates["rate_low"] <= result.rates["rate"]).all()


def test_bad_rows_are_reported_with_line_numbers_and_the_rest_is_estimated() -> None:
    rows = [
        ("a", "2026-01-01", ""),  # line 2
        ("a", "2026-01-03", 1),  # 3
        ("a", "2026-01-02", 0),  # 4: out of order
        ("a", "2026-01-03", 1),  # 5: exact repeat of line 3
        ("a", "2026-01-04", "yes"),  # 6: bad changed
        ("a", "2026-01-20", 1),  # 7: in the future
        ("b", "2026-01-01", ""),  # 8
        ("b", "2026-01-02", 1),  # 9
        ("b", "2026-01-02", 0),  # 10: same time, disagrees with line 9
        ("b", "not a time", 1),  # 11
        (None, "2026-01-02", 1),  # 12
        ("b", "2026-01-05", ""),  # 13: unknown outcome on a later fetch
        ("c", "2026-01-01", 1),  # 14: changed on a first fetch
    ]
    result = estimate_fetch_table(_table(rows), now=NOW)
    kinds = _kinds(result)
    assert kinds == {
        "bad_page": (12,),
        "bad_fetched_at": (11,),
        "future": (7,),
        "bad_changed": (6,),
        "unsorted": (4,),
        "duplicate": (5,),
        "conflict": (9, 10),
        "changed_on_first_fetch": (14,),
        "unknown_changed": (13,),
    }
    messages = {p.kind: p.message for p in result.problems}
    assert messages["bad_changed"].startswith("line 6: changed must be 1, 0 or empty, got 'yes'")
    assert messages["future"].startswith("line 7: fetched_at is after now")
    rates = result.rates.set_index("page")
    assert rates.loc["a", "fetches"] == 4  # lines 2, 3, 4, 6
    assert rates.loc["a", "estimator"] == "poisson_eb"
    assert rates.loc["b", "fetches"] == 3  # lines 8, 9 (with 10), 13
    assert rates.loc["c", "estimator"] == "none" and rates.loc["c", "bucket"] == 0


def test_many_lines_are_listed_briefly() -> None:
    rows = [("a", f"2026-01-01T00:{m:02d}:00Z", "maybe") for m in range(15)]
    (problem,) = [p for p in estimate_fetch_table(_table(rows)).problems if p.kind == "bad_changed"]
    assert problem.lines == tuple(range(2, 17))
    assert "and 5 more" in problem.message


def test_first_line_and_missing_columns() -> None:
    rows = [("a", "2026-01-01", ""), ("a", "nope", 1)]
    result = estimate_fetch_table(_table(rows), first_line=1)
    assert _kinds(result)["bad_fetched_at"] == (2,)
    with pytest.raises(ValueError, match="no column 'changed'"):
        estimate_fetch_table(pd.DataFrame({"page": ["a"], "fetched_at": [1.0]}))


def test_reliable_last_modified_is_used_and_a_liar_is_not() -> None:
    # fetches every 2 days, a change before every other fetch: the honest page's Last-Modified
    # moves to one day before the fetch exactly then; the liar stamps the fetch time
    honest, liar = [], []
    for i in range(12):
        t = 20454.0 + 2.0 * i
        changed = "" if i == 0 else i % 2
        honest.append(("h", t, changed, t - 1.0 if i % 2 else t - 3.0))
        liar.append(("l", t, changed, t))
    result = estimate_fetch_table(_table(honest + liar, lm=True), now=20500.0)
    rates = result.rates.set_index("page")
    assert rates.loc["h", "estimator"] == "last_modified_eb"
    assert rates.loc["l", "estimator"] == "poisson_eb"
    assert np.isfinite(rates["rate"]).all()


def test_array_fast_path_agrees_with_the_table() -> None:
    """The store's typed path and the file interface estimate identical evidence alike,
    including Last-Modified, a repeated fetch and rows out of order."""
    rng = np.random.default_rng(7)
    rows = []
    for page in range(40):
        times = np.sort(rng.uniform(20400.0, 20460.0, rng.integers(1, 12)))
        for k, t in enumerate(times):
            honest = page % 3 == 0  # changes before every fetch; Last-Modified follows
            lm = t - 0.01 if honest else np.nan
            outcome = 1.0 if honest else float(rng.integers(0, 2))
            rows.append((page, float(t), np.nan if k == 0 else outcome, lm, page % 4))
    rows.append(rows[5])  # an exact repeat
    rows = rows[10:] + rows[:10]  # out of order
    table = pd.DataFrame(rows, columns=["page", "fetched_at", "changed", "last_modified", "host"])
    expected = estimate_fetch_table(table, now=20500.0).rates
    expected["page"] = expected["page"].astype(int)
    expected = expected.sort_values("page").reset_index(drop=True)
    got = estimate_fetch_arrays(
        table["page"],
        table["fetched_at"],
        table["changed"],
        table["last_modified"],
        table["host"],
        now=20500.0,
    )
    assert got.page.tolist() == expected["page"].tolist()
    np.testing.assert_allclose(got.rate, expected["rate"], rtol=1e-12)
    np.testing.assert_allclose(got.rate_low, expected["rate_low"], rtol=1e-12)
    np.testing.assert_allclose(got.rate_high, expected["rate_high"], rtol=1e-12)
    assert got.estimator.tolist() == expected["estimator"].tolist()
    assert got.fetches.tolist() == expected["fetches"].tolist()
    assert got.bucket.tolist() == expected["bucket"].tolist()
    assert "last_modified_eb" in got.estimator.tolist()

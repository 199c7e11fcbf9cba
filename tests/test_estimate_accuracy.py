"""The scenario report's estimation accuracy by the pages' number of fetches (issue 25):
fetch classes, errors that fall as fetches grow, and posteriors whose 80 % intervals hold
about 80 % of the true rates."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from estimators.evidence import ChangeIntervals
from scenarios.estimate_accuracy import FETCH_CLASSES, accuracy_table, page_errors


def _crawled(seed: int = 5) -> tuple[ChangeIntervals, np.ndarray, np.ndarray, np.ndarray]:
    """3,000 pages on 30 hosts of 5 sections, rates log-uniform over a decade around a
    factor each section shares (log-normal, sd 1.5); page i fetched ``i % 20`` times a
    period apart."""
    rng = np.random.default_rng(seed)
    n = 3000
    section = np.arange(n) // 20
    host = section // 5
    factor = np.exp(rng.normal(np.log(0.3), 1.5, section.max() + 1))
    rate = np.exp(rng.uniform(-np.log(10.0) / 2, np.log(10.0) / 2, n)) * factor[section]
    fetches = np.arange(n) % 20
    pages, lengths, changed = [], [], []
    for page in range(n):
        k = max(int(fetches[page]) - 1, 0)
        pages += [page] * k
        lengths += [1.0] * k
        changed += list(rng.random(k) < -np.expm1(-rate[page]))
    intervals = ChangeIntervals(
        np.array(pages, dtype=np.int64), np.array(lengths), np.array(changed, dtype=bool), n
    )
    return intervals, fetches, rate, np.stack([host, section])


def test_fetch_classes_cover_every_count_once() -> None:
    ends = [(low, high) for _name, low, high in FETCH_CLASSES]
    assert ends[0] == (0, 0)
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ends))
    assert [name for name, _low, _high in FETCH_CLASSES][1:6] == ["1", "2", "3-4", "5-8", "9-16"]


def test_errors_fall_with_fetches_and_the_intervals_are_calibrated() -> None:
    intervals, fetches, rate, (host, section) = _crawled()
    known = np.ones(rate.size, dtype=bool)
    known[::7] = False  # pages the crawl does not know are left out
    errors = page_errors(intervals, fetches, rate, known, host, section)
    assert len(errors) == known.sum()
    table = accuracy_table(errors).set_index("fetches")
    assert list(table.index) == ["0", "1", "2", "3-4", "5-8", "9-16", "17+"]
    # one fetch or none: no interval, no point estimate
    assert table.loc["0", "with a point estimate"] == 0 == table.loc["1", "with a point estimate"]
    assert table.loc["9-16", "with a point estimate"] == table.loc["9-16", "pages"]
    for way in ("point |ln|", "posterior |ln|", "posterior, group priors |ln|"):
        assert table.loc["17+", way] < table.loc["3-4", way]
    # sections share a rate factor: their priors know more than the population's
    for k in ("0", "1", "2", "3-4"):
        assert table.loc[k, "posterior, group priors |ln|"] < 0.8 * table.loc[k, "posterior |ln|"]
    # calibration: about 80 % of the true rates inside the 80 % intervals
    for k in ("0", "3-4", "9-16", "17+"):
        assert table.loc[k, "80 % coverage"] == pytest.approx(0.80, abs=0.12)
        assert table.loc[k, "80 % coverage, group priors"] == pytest.approx(0.80, abs=0.12)


def test_no_interval_anywhere_gives_no_rows() -> None:
    n = 4
    empty = ChangeIntervals(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool), n)
    errors = page_errors(
        empty, np.ones(n, int), np.ones(n), np.ones(n, bool), np.zeros(n, int), np.zeros(n, int)
    )
    assert errors.empty and accuracy_table(errors).empty

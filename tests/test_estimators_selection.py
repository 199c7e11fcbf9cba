"""Per-page choice of estimator, and Hypothesis properties of the estimates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import (
    ChangeIntervals,
    ChangeRateEstimator,
    EmpiricalBayesChangeRate,
    LastModifiedEvidence,
    LogNormalRatePrior,
    PoissonChangeMLE,
)

PRIOR = LogNormalRatePrior.fixed(math.log(0.2), 1.5)


def test_each_kind_of_evidence_gets_its_estimator() -> None:
    lengths = [[], [1.0, 1.0], [1.0] * 8, [1.0] * 8, [1.0] * 8]
    changed = [[], [0, 0], [1, 0] * 4, [1, 1, 0, 0] * 2, [1, 0] * 4]
    evidence = ChangeIntervals.from_lists(lengths, changed)
    lm = LastModifiedEvidence(
        intervals=np.array([0, 0, 0, 8, 8]),
        changes=np.array([0, 0, 0, 4, 1]),
        exposure=np.array([0.0, 0.0, 0.0, 6.0, 7.5]),
        age_sum=np.array([0.0, 0.0, 0.0, 2.0, 0.5]),
    )
    reliable = np.array([False, False, False, True, True])
    # the default shrinks every page with evidence toward the prior
    shrunk = ChangeRateEstimator(prior=PRIOR).fit(evidence, lm, reliable)
    assert shrunk.estimator_.tolist() == [
        "none",
        "poisson_eb",
        "poisson_eb",
        "last_modified_eb",
        "last_modified_eb",
    ]
    # a page with rich evidence: its posterior mode is near its MLE (ln 2 = 0.69 a day)
    assert shrunk.rate_[2] == pytest.approx(math.log(2.0), rel=0.15)
    # shrink="thin": the unshrunk estimators for rich evidence
    fit = ChangeRateEstimator(prior=PRIOR, shrink="thin").fit(evidence, lm, reliable)
    assert fit.estimator_.tolist() == [
        "none",
        "poisson_eb",
        "poisson_mle",
        "last_modified",
        "last_modified_eb",
    ]
    assert np.isnan(fit.rate_[0])
    assert fit.rate_[2] == PoissonChangeMLE().fit(evidence.take([2])).rate_[0]
    assert np.all(np.isfinite(fit.rate_[1:]))
    # unreliable Last-Modified: change observations instead
    fallback = ChangeRateEstimator(prior=PRIOR, shrink="thin").fit(evidence, lm, np.zeros(5, bool))
    assert fallback.estimator_.tolist()[3:] == ["poisson_mle", "poisson_mle"]


def test_a_page_seen_twice_is_not_put_in_an_extreme_bucket() -> None:
    rng = np.random.default_rng(3)
    n, k = 500, 15
    rates = np.exp(rng.normal(math.log(0.3), 1.0, n))
    t = np.full((n, k), 1.0)
    c = rng.random((n, k)) < -np.expm1(-rates[:, None] * t)
    lengths = [list(row) for row in t] + [[1.0], [1.0]]
    changed = [list(row) for row in c] + [[False], [True]]
    fit = ChangeRateEstimator().fit(ChangeIntervals.from_lists(lengths, changed))
    quiet, busy = fit.rate_[-2], fit.rate_[-1]
    assert fit.estimator_[-1] == "poisson_eb"
    low, high = np.quantile(rates, [0.02, 0.98])
    assert low < quiet < busy < high


_interval_lists = st.lists(st.tuples(st.floats(0.01, 50.0), st.booleans()), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(_interval_lists)
def test_estimates_are_nonnegative_and_inside_their_intervals(
    page: list[tuple[float, bool]],
) -> None:
    evidence = ChangeIntervals.from_lists([[t for t, _ in page]], [[c for _, c in page]])
    for fit in (
        PoissonChangeMLE().fit(evidence),
        EmpiricalBayesChangeRate(prior=PRIOR).fit(evidence),
        ChangeRateEstimator(prior=PRIOR).fit(evidence),
    ):
        assert fit.rate_[0] >= 0
        assert fit.rate_low_[0] <= fit.rate_[0] <= fit.rate_high_[0]


@settings(max_examples=60, deadline=None)
@given(_interval_lists, st.integers(0, 11))
def test_rate_grows_with_the_changes_seen(page: list[tuple[float, bool]], which: int) -> None:
    # turning one no-change interval into a change interval never lowers the estimate
    lengths = [t for t, _ in page]
    before = [c for _, c in page]
    unchanged = [i for i, c in enumerate(before) if not c]
    if not unchanged:
        return
    after = list(before)
    after[unchanged[which % len(unchanged)]] = True
    evidence = ChangeIntervals.from_lists([lengths, lengths], [before, after])
    for fit in (
        PoissonChangeMLE().fit(evidence),
        EmpiricalBayesChangeRate(prior=PRIOR).fit(evidence),
        ChangeRateEstimator(prior=PRIOR, shrink="always").fit(evidence),
    ):
        assert fit.rate_[1] >= fit.rate_[0] * (1 - 1e-9)

"""The irregular-interval Poisson MLE, its interval and the empirical-Bayes posterior mode."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from estimators import (
    ChangeIntervals,
    EmpiricalBayesChangeRate,
    LogNormalRatePrior,
    PoissonChangeMLE,
    solvers,
)
from estimators import evidence as evidence_module
from estimators.defaults import CONFIDENCE
from estimators.likelihood import ChangeLogLikelihood
from estimators.solvers import chi2_level_drop

SEED = 20260105


def _score(rate: float, lengths: np.ndarray, changed: np.ndarray) -> float:
    t_c = lengths[changed]
    with np.errstate(over="ignore"):
        return float(np.sum(t_c / np.expm1(rate * t_c)) - np.sum(lengths[~changed]))


def _loglik(rate: float, lengths: np.ndarray, changed: np.ndarray) -> float:
    t_c = lengths[changed]
    return float(np.sum(np.log(-np.expm1(-rate * t_c))) - rate * np.sum(lengths[~changed]))


def _random_pages(seed: int, n_pages: int) -> tuple[ChangeIntervals, list[np.ndarray], list]:
    rng = np.random.default_rng(seed)
    lengths, changed = [], []
    for _ in range(n_pages):
        k = int(rng.integers(2, 25))
        rate = math.exp(rng.uniform(-5, 3))
        t = rng.exponential(rng.uniform(0.1, 10), k) + 1e-3
        c = rng.random(k) < -np.expm1(-rate * t)
        if c.all() or not c.any():  # both kinds, so that the MLE is finite
            c[0], c[-1] = True, False
        lengths.append(t)
        changed.append(c)
    evidence = ChangeIntervals.from_lists([list(x) for x in lengths], [list(x) for x in changed])
    return evidence, lengths, changed


def test_mle_matches_a_tight_root_of_the_score_equation() -> None:
    evidence, lengths, changed = _random_pages(SEED, 300)
    fit = PoissonChangeMLE().fit(evidence)
    for i, (t, c) in enumerate(zip(lengths, changed, strict=True)):
        root = optimize.brentq(_score, 1e-12, 1e9, args=(t, c), xtol=1e-300, rtol=1e-15)
        assert fit.rate_[i] == pytest.approx(root, rel=1e-9), f"page {i}, seed {SEED}"


def test_equal_intervals_give_the_closed_form() -> None:
    # n intervals of I days, X changes: lambda = -ln(1 - X/n) / I
    cases = [(10, 3, 1.0), (20, 19, 0.5), (5, 1, 7.0), (100, 50, 0.01)]
    evidence = ChangeIntervals.from_lists(
        [[interval] * n for n, _, interval in cases],
        [[True] * x + [False] * (n - x) for n, x, _ in cases],
    )
    fit = PoissonChangeMLE().fit(evidence)
    expected = [-math.log(1 - x / n) / interval for n, x, interval in cases]
    np.testing.assert_allclose(fit.rate_, expected, rtol=1e-11)


def test_limits_no_change_all_changes_one_fetch() -> None:
    evidence = ChangeIntervals.from_lists([[2.0, 3.0], [1.0, 4.0], []], [[0, 0], [1, 1], []])
    fit = PoissonChangeMLE().fit(evidence)
    drop = chi2_level_drop(CONFIDENCE)
    # no change in 5 days: MLE 0, interval [0, 1.92 / 5]
    assert fit.rate_[0] == 0.0
    assert fit.rate_low_[0] == 0.0
    assert fit.rate_high_[0] == pytest.approx(drop / 5.0, rel=1e-12)
    # only changes: MLE +inf, lower end where the log-likelihood is -1.92
    assert fit.rate_[1] == math.inf and fit.rate_high_[1] == math.inf
    low = fit.rate_low_[1]
    assert _loglik(low, np.array([1.0, 4.0]), np.array([True, True])) == pytest.approx(-drop)
    # a page fetched once has no interval: no estimate
    assert np.isnan([fit.rate_[2], fit.rate_low_[2], fit.rate_high_[2]]).all()


def test_profile_likelihood_interval_ends_are_at_the_chi2_level() -> None:
    evidence, lengths, changed = _random_pages(SEED + 1, 50)
    fit = PoissonChangeMLE().fit(evidence)
    drop = chi2_level_drop(CONFIDENCE)
    for i, (t, c) in enumerate(zip(lengths, changed, strict=True)):
        top = _loglik(fit.rate_[i], t, c)
        for end in (fit.rate_low_[i], fit.rate_high_[i]):
            assert _loglik(end, t, c) == pytest.approx(top - drop, abs=1e-8)
        assert fit.rate_low_[i] < fit.rate_[i] < fit.rate_high_[i]


def test_interval_covers_the_true_rate_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(SEED)
    n, k, rate = 4000, 30, 0.3
    t = rng.exponential(3.0, (n, k)) + 0.05
    c = rng.random((n, k)) < -np.expm1(-rate * t)
    evidence = ChangeIntervals(np.repeat(np.arange(n), k), t.ravel(), c.ravel(), n)
    fit = PoissonChangeMLE().fit(evidence)
    coverage = np.mean((fit.rate_low_ <= rate) & (rate <= fit.rate_high_))
    assert 0.93 <= coverage <= 0.97, f"coverage {coverage}, seed {SEED}"


def test_empirical_bayes_is_finite_shrunk_and_tends_to_the_mle() -> None:
    prior = LogNormalRatePrior.fixed(math.log(0.1), 1.0)
    thin = ChangeIntervals.from_lists([[1.0, 1.0], [1.0, 1.0]], [[0, 0], [1, 1]])
    eb = EmpiricalBayesChangeRate(prior=prior).fit(thin)
    # seen twice unchanged: below the prior median, not 0; twice changed: above it, finite
    assert 0 < eb.rate_[0] < 0.1 < eb.rate_[1] < math.inf
    assert (eb.rate_low_ < eb.rate_).all() and (eb.rate_ < eb.rate_high_).all()
    # with plenty of evidence the prior hardly matters
    rng = np.random.default_rng(SEED)
    t = rng.exponential(1.0, 2000)
    c = rng.random(2000) < -np.expm1(-0.7 * t)
    rich = ChangeIntervals(np.zeros(2000, np.intp), t, c, 1)
    mle = PoissonChangeMLE().fit(rich).rate_[0]
    assert EmpiricalBayesChangeRate(prior=prior).fit(rich).rate_[0] == pytest.approx(mle, rel=0.01)


def test_posterior_mode_solves_the_penalized_score() -> None:
    evidence, lengths, changed = _random_pages(SEED + 2, 40)
    mu, sigma = math.log(0.5), 1.5
    eb = EmpiricalBayesChangeRate(prior=LogNormalRatePrior.fixed(mu, sigma)).fit(evidence)
    for i, (t, c) in enumerate(zip(lengths, changed, strict=True)):

        def grad(theta: float, t: np.ndarray = t, c: np.ndarray = c) -> float:
            rate = math.exp(theta)
            return rate * _score(rate, t, c) - (theta - mu) / sigma**2

        root = optimize.brentq(grad, -30, 30, xtol=1e-14)
        assert math.log(eb.rate_[i]) == pytest.approx(root, abs=1e-9)


def test_prior_recovers_a_lognormal_population() -> None:
    rng = np.random.default_rng(SEED)
    n, k = 3000, 20
    rates = np.exp(rng.normal(math.log(0.2), 1.0, n))
    t = rng.exponential(2.0, (n, k)) + 0.01
    c = rng.random((n, k)) < -np.expm1(-rates[:, None] * t)
    evidence = ChangeIntervals(np.repeat(np.arange(n), k), t.ravel(), c.ravel(), n)
    prior = LogNormalRatePrior().fit(evidence)
    assert prior.mu_ == pytest.approx(math.log(0.2), abs=0.1)
    assert prior.sigma_ == pytest.approx(1.0, abs=0.1)


def test_one_interval_a_page_fits_mu_with_sigma_held_and_the_share_that_changed() -> None:
    """One equal-length interval per page says only what share of the pages changed: sigma
    is held at ``unidentified_sigma`` (the fit used to slide to its lower bound, 0.25), and
    mu is the one at which the prior predicts that share."""
    rng = np.random.default_rng(SEED)
    n, length = 3000, 10.0
    rates = np.exp(rng.uniform(math.log(0.006), math.log(1.2), n))
    changed = rng.random(n) < -np.expm1(-rates * length)
    one = ChangeIntervals(np.arange(n), np.full(n, length), changed, n)
    prior = LogNormalRatePrior(unidentified_sigma=1.5).fit(one)
    assert not prior.sigma_fitted_ and prior.sigma_ == pytest.approx(1.5)
    theta = np.linspace(-25.0, 15.0, 8001)
    density = np.exp(-0.5 * ((theta - prior.mu_) / 1.5) ** 2)
    predicted = float((-np.expm1(-np.exp(theta) * length) * density).sum() / density.sum())
    assert predicted == pytest.approx(changed.mean(), abs=0.005)
    # a second interval for enough pages identifies sigma: fitted again
    k = LogNormalRatePrior().min_interval_pages
    page = np.concatenate([np.arange(n), np.arange(k)])
    again = rng.random(k) < -np.expm1(-rates[:k] * length)
    two = ChangeIntervals(page, np.full(n + k, length), np.concatenate([changed, again]), n)
    assert LogNormalRatePrior().fit(two).sigma_fitted_


def test_prior_needs_some_evidence() -> None:
    with pytest.raises(ValueError, match="no page has"):
        LogNormalRatePrior().fit(ChangeIntervals.from_lists([[]], [[]]))


def _mixed_pages(seed: int, n_pages: int) -> ChangeIntervals:
    """Pages of 0-12 intervals at rates over four decades: no change, only changes, both."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 13, n_pages)
    rate = np.repeat(10 ** rng.uniform(-2, 2, n_pages), counts)
    length = rng.exponential(1.0, counts.sum()) + 1e-3
    changed = rng.random(counts.sum()) < -np.expm1(-rate * length)
    return ChangeIntervals(np.repeat(np.arange(n_pages), counts), length, changed, n_pages)


def test_block_by_block_solving_gives_the_same_estimates(monkeypatch: pytest.MonkeyPatch) -> None:
    # blocks of a few pages (as 1,000,000 pages are cut into blocks of about 2**18 intervals)
    # against one block of all pages: every page is solved on its own, so bit for bit the same
    evidence = _mixed_pages(SEED, 400)
    whole = [PoissonChangeMLE().fit(evidence), EmpiricalBayesChangeRate().fit(evidence)]
    monkeypatch.setattr(solvers, "BLOCK_TERMS", 16)
    assert len(solvers.page_blocks(ChangeLogLikelihood.from_intervals(evidence))) > 20
    blocks = [PoissonChangeMLE().fit(evidence), EmpiricalBayesChangeRate().fit(evidence)]
    for one, many in zip(whole, blocks, strict=True):
        for name in ("rate_", "rate_low_", "rate_high_"):
            np.testing.assert_array_equal(getattr(many, name), getattr(one, name), err_msg=name)


def test_block_sums_of_grouped_intervals_match_the_ungrouped_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    evidence = _mixed_pages(SEED, 500)
    monkeypatch.setattr(evidence_module, "BLOCK_ROWS", 32)
    grouped = ChangeIntervals(evidence.page, evidence.length, evidence.changed, 500)
    order = np.random.default_rng(SEED).permutation(evidence.page.size)
    shuffled = ChangeIntervals(
        evidence.page[order], evidence.length[order], evidence.changed[order], 500
    )
    assert grouped.grouped and not shuffled.grouped
    np.testing.assert_array_equal(grouped.n_changes, shuffled.n_changes)
    for ivs in (grouped, shuffled):  # the same change intervals, page by page
        page, length = ivs.change_intervals
        assert np.array_equal(length, ivs.changed_lengths)
        order = np.lexsort((length, page))
        want_page, want_length = evidence.page[evidence.changed], evidence.length[evidence.changed]
        want = np.lexsort((want_length, want_page))
        np.testing.assert_array_equal(length[order], want_length[want])
        np.testing.assert_array_equal(page[order], want_page[want])
    for name in ("changed_time", "unchanged_time"):
        np.testing.assert_allclose(
            getattr(grouped, name), getattr(shuffled, name), rtol=1e-12, err_msg=name
        )
    assert np.array_equal(grouped.unchanged_time == 0, shuffled.unchanged_time == 0)


def test_posterior_mean_of_the_log_rate_integrates_the_posterior() -> None:
    evidence, lengths, changed = _random_pages(SEED + 3, 30)
    mu, sigma = math.log(0.5), 1.5
    prior = LogNormalRatePrior.fixed(mu, sigma)
    mean = EmpiricalBayesChangeRate(prior=prior, point="mean").fit(evidence)
    mode = EmpiricalBayesChangeRate(prior=prior).fit(evidence)
    grid = np.linspace(-25.0, 15.0, 40001)
    rate = np.exp(grid)
    for i, (t, c) in enumerate(zip(lengths, changed, strict=True)):
        with np.errstate(divide="ignore"):
            log_post = (
                np.log(-np.expm1(-np.outer(rate, t[c]))).sum(axis=1)
                - rate * t[~c].sum()
                - 0.5 * ((grid - mu) / sigma) ** 2
            )
        weight = np.exp(log_post - log_post.max())
        expected = float(np.sum(weight * grid) / np.sum(weight))
        # 24 points over 2.5 half-widths of the interval each side: within 1 % of the rate
        assert math.log(mean.rate_[i]) == pytest.approx(expected, abs=1e-2)
    # the interval is the mode's, whatever the point reported
    np.testing.assert_array_equal(mean.rate_low_, mode.rate_low_)
    np.testing.assert_array_equal(mean.rate_high_, mode.rate_high_)


def test_posterior_mean_leaves_the_knee_of_one_sided_evidence() -> None:
    # changed at every fetch: the likelihood is flat above about one change per interval,
    # the mode sits at that knee, the mean moves into the prior's upper tail; never changed:
    # the other way
    prior = LogNormalRatePrior.fixed(math.log(0.1), 2.5)
    pages = ChangeIntervals.from_lists([[10.0] * 4, [10.0] * 4], [[1] * 4, [0] * 4])
    mode = EmpiricalBayesChangeRate(prior=prior).fit(pages).rate_
    mean = EmpiricalBayesChangeRate(prior=prior, point="mean").fit(pages).rate_
    assert mean[0] > 2 * mode[0]
    assert mean[1] < mode[1]
    with pytest.raises(ValueError, match="point"):
        EmpiricalBayesChangeRate(prior=prior, point="median").fit(pages)

"""Change-rate estimator benchmarks: accuracy on simulated pages, and speed.

Run with ``python tests/benchmarks/bench_estimators.py``. Every figure is printed beside a
baseline measured in the same run:

* accuracy: pages with known rates from a two-cluster mixture (fast churners, near-static
  pages; REFERENCE.md sec. 7) fetched at irregular intervals, without Last-Modified, with
  honest Last-Modified, and with a share of hosts whose servers lie (stamp the fetch time,
  never move, move on every fetch, or date the future). Per estimator and per decade of the
  true rate: bias (mean of ln(estimate / true) over finite positive estimates), median
  |ln(estimate / true)| (0 and +inf count as infinitely wrong) and the share of such
  estimates; beside the naive X/T and the rate implied by Nutch's AdaptiveFetchSchedule after
  the same fetches (interval x0.8 when changed, x1.4 when not, within [60 s, 365 d], starting
  at Nutch's default 30 days; implied rate 1 / interval).
* speed: ``--speed-pages`` pages x ``--fetches`` fetches from the fetch log to rates, intervals,
  estimator names and buckets through ``estimate_fetch_arrays`` (the path of ``crawlplan
  estimate``), without and with Last-Modified; and the MLE alone, beside a per-page
  ``scipy.optimize.brentq`` on the MLE's score equation timed on a sample of all pages
  (pages with no change, or only changes, seen get their estimate in closed form there too);
  and the Gamma posteriors (``GammaRatePosterior``) from the same intervals: population prior
  alone, with host and section priors (sections of 5 pages, 4 per host), and with host and
  section priors and Last-Modified (its reliability check included), beside the point
  estimates of the whole pipeline above.
* the Bayes plan's prior (``fit_grid_prior``, the nightly run's EM on a sample of
  ``PRIOR_PAGES`` pages): its EM steps as two matrix-vector products, beside the same steps
  on the (n, G) array of posteriors (the code until 2026-12-07), and their largest
  difference.

Writes ``bench-results/estimators.json`` and, when matplotlib is importable,
``bench-results/estimators.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy import optimize

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from estimators import (
    ChangeIntervals,
    ChangeRateEstimator,
    ChoLastModifiedRate,
    EmpiricalBayesChangeRate,
    GammaRatePosterior,
    ImprovedRegularRate,
    NaiveRate,
    PoissonChangeMLE,
    XylemeLastModifiedRate,
    assess_last_modified,
    change_intervals_from_fetches,
    last_modified_evidence_from_fetches,
)
from estimators.bayes_action import (
    PRIOR_ITERATIONS,
    PRIOR_PAGES,
    evidence_grid,
    fit_grid_prior,
    grid_log_likelihood,
)
from estimators.defaults import CONFIDENCE
from estimators.fetch_table import estimate_fetch_arrays

OUT = Path(__file__).resolve().parents[2] / "bench-results"
PAGES_PER_HOST = 20
ROUNDS = 3
FloatArray = NDArray[np.float64]


class Web:
    """A simulated fetch log: arrays of shape (pages * fetches,), sorted by page then time."""

    def __init__(self, n_pages: int, n_fetches: int, lying_share: float, seed: int) -> None:
        rng = np.random.default_rng(seed)
        fast = rng.random(n_pages) < 0.35
        log10_rate = np.where(
            fast, rng.normal(0.0, 0.5, n_pages), rng.normal(math.log10(1 / 90), 0.6, n_pages)
        )
        self.rate = 10.0**log10_rate  # changes per day
        base = np.exp(rng.normal(math.log(3.0), 1.0, n_pages))  # days between fetches
        gaps = base[:, None] * np.exp(rng.normal(0.0, 0.5, (n_pages, n_fetches - 1)))
        start = rng.uniform(0, 30, n_pages)
        times = np.concatenate([start[:, None], start[:, None] + np.cumsum(gaps, axis=1)], 1)
        lam = self.rate[:, None]
        changed = rng.random(gaps.shape) < -np.expm1(-lam * gaps)
        # time since the last change at a fetch that follows a change: truncated exponential
        u = rng.random(gaps.shape)
        since = -np.log1p(-u * -np.expm1(-lam * gaps)) / lam
        stamp = np.where(changed, times[:, 1:] - since, -np.inf)
        first = times[:, :1] - rng.exponential(1.0 / lam)
        modified = np.maximum.accumulate(np.concatenate([first, stamp], axis=1), axis=1)

        self.host = np.arange(n_pages) // PAGES_PER_HOST
        n_hosts = int(self.host.max()) + 1
        kind = np.where(rng.random(n_hosts) < lying_share, rng.integers(1, 5, n_hosts), 0)
        page_kind = kind[self.host][:, None]
        lies = np.where(
            page_kind == 1,
            times,  # stamps the response time
            np.where(
                page_kind == 2,
                times[:, :1] - 100.0,  # never moves
                np.where(page_kind == 3, times - rng.uniform(0.01, 0.5, times.shape), times + 30),
            ),
        )
        self.lying_page = kind[self.host] > 0
        self.page = np.repeat(np.arange(n_pages), n_fetches)
        self.fetched_at = times.ravel()
        outcome = np.concatenate([np.full((n_pages, 1), np.nan), changed.astype(float)], 1)
        self.changed = outcome.ravel()
        self.modified_honest = modified.ravel()
        self.modified = np.where(page_kind > 0, lies, modified).ravel()
        self.changed_2d = changed
        self.n_pages = n_pages


def nutch_rate(changed: NDArray[np.bool_]) -> FloatArray:
    """1 / interval of Nutch's AdaptiveFetchSchedule after these outcomes, per day."""
    interval = np.full(changed.shape[0], 30.0)
    for column in changed.T:
        interval = np.clip(np.where(column, interval * 0.8, interval * 1.4), 60 / 86400, 365.0)
    return 1.0 / interval


def score_by_decade(
    true: FloatArray, estimates: dict[str, FloatArray]
) -> dict[str, dict[str, dict[str, float]]]:
    """Bias, median |ln ratio| and share of 0/inf/NaN per estimator and decade of true rate."""
    decades = np.floor(np.log10(true)).astype(int)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, est in estimates.items():
        rows: dict[str, dict[str, float]] = {}
        for label, mask in [("all", np.ones(true.size, bool))] + [
            (f"1e{d:+d}", decades == d) for d in range(-3, 2)
        ]:
            if mask.sum() < 20:
                continue
            e, t = est[mask], true[mask]
            ok = np.isfinite(e) & (e > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                err = np.where(ok, np.abs(np.log(e / t)), np.inf)
            rows[label] = {
                "bias": float(np.mean(np.log(e[ok] / t[ok]))) if ok.any() else math.nan,
                "median_abs_log": float(np.median(err)),
                "degenerate": float(np.mean(~ok)),
                "pages": int(mask.sum()),
            }
        out[name] = rows
    return out


def print_table(title: str, scores: dict[str, dict[str, dict[str, float]]]) -> None:
    labels = ["all", "1e-3", "1e-2", "1e-1", "1e+0", "1e+1"]
    print(f"\n{title}")
    print("  median |ln(est/true)| (bias = mean ln(est/true) over finite > 0; % 0/inf)")
    head = "".join(f"{lab:>22s}" for lab in labels)
    print(f"  {'estimator':18s}{head}")
    for name, rows in scores.items():
        cells = []
        for lab in labels:
            r = rows.get(lab)
            if r is None:
                cells.append(f"{'-':>22s}")
            else:
                med = "inf" if math.isinf(r["median_abs_log"]) else f"{r['median_abs_log']:.2f}"
                cells.append(f"{med:>6s} ({r['bias']:+.2f};{100 * r['degenerate']:3.0f}%)")
        print(f"  {name:18s}" + "".join(f"{c:>22s}" for c in cells))
    pages = scores[next(iter(scores))]
    print("  pages per decade: " + ", ".join(f"{k} {v['pages']}" for k, v in pages.items()))


def bench_accuracy(n_pages: int, n_fetches: int, lying_share: float, seed: int) -> dict:
    web = Web(n_pages, n_fetches, lying_share, seed)
    intervals = change_intervals_from_fetches(
        web.page, web.fetched_at, web.changed, n_pages=n_pages
    )
    change_based = {
        "naive X/T": NaiveRate().fit(intervals).rate_,
        "cho_regular": ImprovedRegularRate().fit(intervals).rate_,
        "poisson_mle": PoissonChangeMLE().fit(intervals).rate_,
        "poisson_eb": EmpiricalBayesChangeRate().fit(intervals).rate_,
        "nutch_adaptive": nutch_rate(web.changed_2d),
        "selected (no LM)": ChangeRateEstimator().fit(intervals).rate_,
        "selected, shrink=thin (no LM)": ChangeRateEstimator(shrink="thin").fit(intervals).rate_,
    }
    results: dict = {"change_observations": score_by_decade(web.rate, change_based)}
    print_table(
        f"Accuracy, {n_pages} pages x {n_fetches} fetches, change observations only",
        results["change_observations"],
    )
    for label, modified in [("honest", web.modified_honest), ("lying", web.modified)]:
        evidence = last_modified_evidence_from_fetches(
            web.page, web.fetched_at, modified, n_pages=n_pages
        )
        reliability = assess_last_modified(
            web.page, web.fetched_at, web.changed, modified, n_pages=n_pages, host=web.host
        )
        selected = ChangeRateEstimator().fit(intervals, evidence, reliability.reliable)
        estimates = {
            "lm_xyleme": XylemeLastModifiedRate().fit(evidence).rate_,
            "lm_cho": ChoLastModifiedRate().fit(evidence).rate_,
            "naive X/T": change_based["naive X/T"],
            "nutch_adaptive": change_based["nutch_adaptive"],
            "selected": selected.rate_,
            "selected, shrink=thin": ChangeRateEstimator(shrink="thin")
            .fit(intervals, evidence, reliability.reliable)
            .rate_,
        }
        title = (
            "honest Last-Modified on every host"
            if label == "honest"
            else f"Last-Modified, {100 * lying_share:.0f}% of hosts lying "
            f"({100 * web.lying_page.mean():.0f}% of pages)"
        )
        results[label] = score_by_decade(web.rate, estimates)
        print_table(f"Accuracy, {title} (lm_* use every page's dates, unchecked)", results[label])
        if label == "lying":
            detected = ~reliability.reliable[web.lying_page]
            trusted = reliability.reliable[~web.lying_page]
            print(
                f"  reliability test: {100 * detected.mean():.1f}% of lying pages rejected, "
                f"{100 * trusted.mean():.1f}% of honest pages accepted; estimators chosen: "
                + ", ".join(f"{k} {v}" for k, v in selected.estimator_.value_counts().items() if v)
            )
            results["reliability"] = {
                "lying_rejected": float(detected.mean()),
                "honest_accepted": float(trusted.mean()),
            }
    return results


def _score(rate: float, t_c: FloatArray, unchanged: float) -> float:
    return float(np.sum(t_c / np.expm1(rate * t_c))) - unchanged


def _loglik(rate: float, t_c: FloatArray, unchanged: float) -> float:
    return float(np.sum(np.log(-np.expm1(-rate * t_c)))) - rate * unchanged


def _below_level(rate: float, t_c: FloatArray, unchanged: float, level: float) -> float:
    return _loglik(rate, t_c, unchanged) - level


def bench_speed(n_pages: int, n_fetches: int, sample: int, seed: int) -> dict:
    web = Web(n_pages, n_fetches, 0.2, seed)
    hosts = np.repeat(web.host, n_fetches)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # the path of `crawlplan estimate`: fetch log -> rates, intervals, estimator, bucket
    t0 = time.perf_counter()
    plain = estimate_fetch_arrays(web.page, web.fetched_at, web.changed)
    ours = time.perf_counter() - t0
    buckets_used = int(np.unique(plain.bucket).size)
    del plain
    t0 = time.perf_counter()
    with_lm = estimate_fetch_arrays(web.page, web.fetched_at, web.changed, web.modified, hosts)
    ours_lm = time.perf_counter() - t0
    lm_share = float(np.mean(np.char.startswith(with_lm.estimator, "last_modified")))
    del with_lm
    # baseline: the unshrunk estimators for pages with rich evidence (the default until
    # 2026-11-27)
    t0 = time.perf_counter()
    thin = estimate_fetch_arrays(
        web.page,
        web.fetched_at,
        web.changed,
        web.modified,
        hosts,
        estimator=ChangeRateEstimator(shrink="thin"),
    )
    thin_lm = time.perf_counter() - t0
    del thin
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # the MLE alone, from fresh intervals (per-page sums included, as in the baseline's loop)
    def fresh() -> ChangeIntervals:
        return change_intervals_from_fetches(web.page, web.fetched_at, web.changed, n_pages=n_pages)

    intervals = fresh()
    mle = PoissonChangeMLE().fit(intervals)

    # Baseline: the same estimates page by page, as a per-page implementation would compute
    # them, on a sample of all pages: a page with no change seen gets 0 and one with only
    # changes +inf (no root to find; the interval's ends in closed form or by one brentq),
    # the others one brentq on the score equation (and one per end of the interval).
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(n_pages, min(sample, n_pages), replace=False))
    lengths = intervals.length.reshape(n_pages, n_fetches - 1)
    flags = intervals.changed.reshape(n_pages, n_fetches - 1)

    def brentq_mle() -> list[float]:
        roots = []
        for i in chosen:
            t, c = lengths[i], flags[i]
            t_c, unchanged = t[c], float(t[~c].sum())
            n_c = t_c.size
            if n_c == 0:
                roots.append(0.0)
            elif unchanged == 0:
                roots.append(math.inf)
            else:
                roots.append(
                    optimize.brentq(
                        _score,
                        n_c / (unchanged + 0.5 * t_c.sum()) * (1 - 1e-12),
                        n_c / unchanged * (1 + 1e-12),
                        args=(t_c, unchanged),
                        xtol=1e-14,
                    )
                )
        return roots

    roots = brentq_mle()
    finite = np.isfinite(roots) & (np.array(roots) > 0)
    agree = float(np.max(np.abs(np.array(roots)[finite] / mle.rate_[chosen[finite]] - 1)))
    assert np.array_equal(np.array(roots)[~finite], mle.rate_[chosen[~finite]])

    def brentq_interval() -> None:
        # the rest of our work: both ends of the profile-likelihood interval
        for i, root in zip(chosen, roots, strict=True):
            t, c = lengths[i], flags[i]
            t_c, unchanged = t[c], float(t[~c].sum())
            if root == 0:  # [0, drop / U]
                _ = 1.920729410347062 / unchanged
            elif math.isinf(root):  # [lambda where l = -drop, inf]
                level = -1.920729410347062
                optimize.brentq(_below_level, 1e-12, 1e12, args=(t_c, 0.0, level))
            else:
                level = _loglik(root, t_c, unchanged) - 1.920729410347062
                args = (t_c, unchanged, level)
                optimize.brentq(_below_level, root * 1e-9, root, args=args)
                optimize.brentq(_below_level, root, root * 1e9, args=args)

    def timed(work: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        work()
        return time.perf_counter() - t0

    def mle_fit(confidence: float | None) -> Callable[[], object]:
        intervals = fresh()
        return lambda: PoissonChangeMLE(confidence=confidence).fit(intervals)

    # rounds interleave ours and the baseline so that both see the same load on a shared
    # machine; each figure is the best of its rounds (as timeit reports)
    best = {"mle_interval": math.inf, "mle_only": math.inf, "brentq": math.inf, "ends": math.inf}
    for _ in range(ROUNDS):
        best["mle_interval"] = min(best["mle_interval"], timed(mle_fit(CONFIDENCE)))
        best["mle_only"] = min(best["mle_only"], timed(mle_fit(None)))
        best["brentq"] = min(best["brentq"], timed(brentq_mle))
        best["ends"] = min(best["ends"], timed(brentq_interval))
    mle_interval, mle_only = best["mle_interval"], best["mle_only"]

    # Gamma posteriors of the same pages, beside the point estimates above
    groups = [("host", web.host), ("section", np.arange(n_pages) // 5)]
    t0 = time.perf_counter()
    GammaRatePosterior().fit(fresh())
    posterior_population = time.perf_counter() - t0
    t0 = time.perf_counter()
    GammaRatePosterior().fit(fresh(), groups=groups)
    posterior_groups = time.perf_counter() - t0
    t0 = time.perf_counter()
    reliable = assess_last_modified(
        web.page, web.fetched_at, web.changed, web.modified, n_pages=n_pages, host=web.host
    ).reliable
    evidence = last_modified_evidence_from_fetches(
        web.page, web.fetched_at, web.modified, n_pages=n_pages
    )
    GammaRatePosterior().fit(fresh(), groups=groups, last_modified=evidence, reliable=reliable)
    posterior_lm = time.perf_counter() - t0
    per_page_baseline = best["brentq"] / chosen.size
    per_page_interval = (best["brentq"] + best["ends"]) / chosen.size
    result = {
        "pages": n_pages,
        "fetches": n_fetches,
        "seconds_full": ours,
        "last_modified_estimates_share": lm_share,
        "seconds_full_with_last_modified": ours_lm,
        "seconds_full_with_last_modified_shrink_thin": thin_lm,
        "seconds_mle_with_interval": mle_interval,
        "seconds_mle_only": mle_only,
        "baseline_seconds_per_page_mle": per_page_baseline,
        "baseline_seconds_per_page_mle_interval": per_page_interval,
        "baseline_sample": int(chosen.size),
        "speedup_mle": per_page_baseline * n_pages / mle_only,
        "speedup_mle_interval": per_page_interval * n_pages / mle_interval,
        "speedup_full_vs_mle_interval": per_page_interval * n_pages / ours,
        "max_relative_difference_to_brentq": agree,
        "seconds_posterior_population_prior": posterior_population,
        "seconds_posterior_host_section_priors": posterior_groups,
        "seconds_posterior_host_section_last_modified": posterior_lm,
        "peak_rss_mb": rss,
        "rss_before_mb": rss0,
        "buckets_used": buckets_used,
    }
    print(f"\nSpeed, {n_pages:,} pages x {n_fetches} fetches ({intervals.length.size:,} intervals)")
    print(f"  fetch log -> rate, interval, estimator, bucket:      {ours:7.2f} s")
    print(
        f"  the same with Last-Modified (reliability, evidence): {ours_lm:7.2f} s "
        f"({100 * lm_share:.0f} % of pages estimated from Last-Modified)"
    )
    print(f"  baseline: the same, shrink=thin (unshrunk rich pages): {thin_lm:7.2f} s")
    print(f"  (MLE and brentq figures: best of {ROUNDS} interleaved rounds)")
    print(f"  PoissonChangeMLE, MLE and profile interval:          {mle_interval:7.2f} s")
    print(f"  PoissonChangeMLE, MLE only (confidence=None):        {mle_only:7.2f} s")
    print(
        f"  scipy brentq per page on {chosen.size} pages "
        f"({int(finite.sum())} with a finite MLE): MLE {1e6 * per_page_baseline:6.1f} us, "
        f"MLE + interval {1e6 * per_page_interval:6.1f} us"
    )
    print(
        f"  per-page speedup: MLE only {result['speedup_mle']:.0f}x, MLE + interval "
        f"{result['speedup_mle_interval']:.0f}x, whole pipeline vs MLE + interval "
        f"{result['speedup_full_vs_mle_interval']:.0f}x; max |ours/brentq - 1| = {agree:.1e}"
    )
    print(f"  GammaRatePosterior, population prior:               {posterior_population:7.2f} s")
    print(f"  GammaRatePosterior, host and section priors:         {posterior_groups:7.2f} s")
    print(f"  the same with Last-Modified (reliability, evidence): {posterior_lm:7.2f} s")
    print(f"  peak RSS {rss:.0f} MB (simulation included)")
    return result


def _em_on_posteriors(loglik: FloatArray, iterations: int) -> FloatArray:
    """The baseline: ``fit_grid_prior``'s EM as it ran until 2026-12-07, each step forming
    every page's posterior, (n, G)."""
    lik = np.exp(loglik - loglik.max(axis=1, keepdims=True))
    weights = np.full(lik.shape[1], 1.0 / lik.shape[1])
    for _ in range(iterations):
        post = lik * weights
        post /= post.sum(axis=1, keepdims=True)
        weights = post.sum(axis=0) / lik.shape[0]
    return weights


def bench_bayes_prior(n_fetches: int, seed: int) -> dict:
    """The Bayes plan's prior on the nightly run's sample, ``PRIOR_PAGES`` pages."""
    web = Web(PRIOR_PAGES, n_fetches, 0.0, seed)
    intervals = change_intervals_from_fetches(
        web.page, web.fetched_at, web.changed, n_pages=PRIOR_PAGES
    )
    grid = evidence_grid(intervals)
    assert grid is not None
    loglik, has = grid_log_likelihood(grid, intervals)
    loglik = loglik[has]
    times: dict[str, list[float]] = {"ours": [], "baseline": []}
    for _ in range(ROUNDS):  # interleaved, best of each
        t0 = time.perf_counter()
        ours = fit_grid_prior(loglik)
        times["ours"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        baseline = _em_on_posteriors(loglik, PRIOR_ITERATIONS)
        times["baseline"].append(time.perf_counter() - t0)
    result = {
        "pages": int(loglik.shape[0]),
        "grid_points": int(grid.size),
        "seconds": min(times["ours"]),
        "baseline_seconds": min(times["baseline"]),
        "max_weight_difference": float(np.abs(ours - baseline).max()),
    }
    print(
        f"\nBayes plan prior, {result['pages']:,} pages x {grid.size} grid points, "
        f"{PRIOR_ITERATIONS} EM steps (best of {ROUNDS}):"
    )
    print(f"  matrix-vector steps:                        {result['seconds']:7.2f} s")
    print(f"  baseline, every page's posterior each step: {result['baseline_seconds']:7.2f} s")
    print(f"  largest weight difference: {result['max_weight_difference']:.1e}")
    return result


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, key, title in [
        (axes[0], "change_observations", "change observations only"),
        (axes[1], "lying", "Last-Modified with lying hosts"),
    ]:
        for name, rows in results[key].items():
            labels = [k for k in rows if k != "all"]
            ys = [rows[k]["median_abs_log"] for k in labels]
            ax.plot(labels, ys, marker="o", label=name)
        ax.set_title(title)
        ax.set_xlabel("true rate, changes per day (decade)")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("median |ln(estimate / true)|")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--accuracy-pages", type=int, default=20_000)
    parser.add_argument("--speed-pages", type=int, default=1_000_000)
    parser.add_argument("--fetches", type=int, default=20)
    parser.add_argument("--lying-share", type=float, default=0.2)
    parser.add_argument("--sample", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=20260105)
    args = parser.parse_args()
    print(f"seed {args.seed}")
    results = {
        "accuracy": bench_accuracy(args.accuracy_pages, args.fetches, args.lying_share, args.seed),
        "speed": bench_speed(args.speed_pages, args.fetches, args.sample, args.seed),
        "bayes_prior": bench_bayes_prior(args.fetches, args.seed),
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "estimators.json").write_text(json.dumps(results, indent=2))
    png = OUT / "estimators.png"
    if plot(results["accuracy"], png):
        print(f"\nwrote {OUT / 'estimators.json'} and {png}")
    else:
        print(f"\nwrote {OUT / 'estimators.json'}; no plot: matplotlib is not installed")


if __name__ == "__main__":
    main()

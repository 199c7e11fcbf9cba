"""Accuracy of the Gamma rate posteriors on simulated worlds, beside the point estimates.

Run with ``python tests/benchmarks/bench_posterior_accuracy.py``. A world of
``scenarios.world`` (the default two-cluster mixture of rates, sections sharing a log-normal
rate factor of sd ``--section-sigma``) is crawled by the uniform policy at budgets of 1/28 and
1/7 of its pages per period for ``--periods`` periods; then, from the crawl's own intervals:

* ``PoissonChangeMLE`` (the point MLE), ``ChangeRateEstimator`` (the point estimates the
  planner uses: MLE or log-normal posterior mode per page);
* ``GammaRatePosterior`` means, with the population prior alone and with host and section
  priors; and how often the true rate falls in their 90 % and 80 % credible intervals.

Errors: median |ln(estimate / true)| over all pages (0 and inf count as infinitely wrong), and
the mean |estimate - true| over the pages whose MLE is finite (rates per period).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from estimators import ChangeRateEstimator, GammaRatePosterior, LogNormalRatePrior, PoissonChangeMLE
from scenarios.policies.baselines import UniformPolicy
from scenarios.simulator import CrawlLog, Observations, SimulationSettings, simulate
from scenarios.world import WorldSpec, build_world

FloatArray = NDArray[np.float64]


class _Watching(UniformPolicy):
    """The uniform policy, keeping the crawl log."""

    log: CrawlLog

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        self.log = log


def _log_error(estimate: FloatArray, truth: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(np.log(estimate / truth))
    return np.where(np.isfinite(err), err, np.inf)


def run(seed: int, share: float, section_sigma: float, pages: int, periods: int) -> None:
    world = build_world(WorldSpec(pages=pages, section_sigma=section_sigma), seed, periods)
    policy = _Watching()
    settings = SimulationSettings(periods=periods, budget=int(pages * share), seed=seed)
    simulate(world, policy, settings)
    log = policy.log
    intervals = log.change_intervals()
    truth = world.rate
    mle = PoissonChangeMLE(confidence=None).fit(intervals).rate_
    prior = LogNormalRatePrior(max_pages=3000, grid_step=0.1)
    point = ChangeRateEstimator(prior=prior).fit(intervals).rate_
    population = GammaRatePosterior().fit(intervals)
    t0 = time.perf_counter()
    grouped = GammaRatePosterior().fit(
        intervals, groups=[("host", log.host), ("section", log.section)]
    )
    seconds = time.perf_counter() - t0
    seen = (log.fetches > 0) & (truth > 0)
    finite = seen & np.isfinite(mle)
    estimates = {
        "MLE": mle,
        "point (ChangeRateEstimator)": point,
        "posterior mean, population prior": population.mean_,
        "posterior mean, host+section priors": grouped.mean_,
    }
    print(
        f"\nseed {seed}, budget 1/{round(1 / share)}, section_sigma {section_sigma}: "
        f"{int(seen.sum())} pages, median {np.median(intervals.n_intervals[seen]):.0f} "
        f"intervals a page; grouped fit {seconds:.2f} s"
    )
    print(f"  {'estimate':38s} median|ln(est/true)|  mean|est-true| (finite MLE)")
    for name, value in estimates.items():
        med = float(np.median(_log_error(value[seen], truth[seen])))
        mae = float(np.mean(np.abs(value[finite] - truth[finite])))
        print(f"  {name:38s} {med:20.3f}  {mae:.4f}")
    for name, fit in (("population", population), ("host+section", grouped)):
        cover = []
        for level in (0.9, 0.8):
            low, high = fit.posterior_.interval(level)
            cover.append(float(np.mean((truth[seen] >= low[seen]) & (truth[seen] <= high[seen]))))
        print(f"  coverage, {name} priors: 90 % interval {cover[0]:.3f}, 80 % {cover[1]:.3f}")
    levels = ", ".join(
        f"{g.name}: between-group sd {g.between_sd:.2f}, median weight {np.median(g.weight):.2f}"
        for g in grouped.group_priors_
    )
    print(f"  group priors: {levels}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--periods", type=int, default=112)
    parser.add_argument("--section-sigma", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for seed in args.seeds:
        for share in (1 / 28, 1 / 7):
            run(seed, share, args.section_sigma, args.pages, args.periods)


if __name__ == "__main__":
    main()

"""How accurate must change-rate estimates be? The optimum's gain kept at a given estimate noise.

Run as a script (``python tests/benchmarks/estimate_noise.py``; a few seconds, not part of
``make bench``). For a world's true rates (a :class:`scenarios.world.WorldSpec` rate model) and
a budget (a share of the pages crawled a period), every page's log rate is observed with
Gaussian noise of standard deviation ``sd``, and three schedules are scored in closed form,
each page's time-averaged freshness ``(f / lambda) (1 - exp(-lambda / f))`` at its crawl rate
``f`` (Cho & Garcia-Molina), as the share of the optimum's gain over a uniform recrawl,
``(schedule - uniform) / (optimum - uniform)``:

* **plug-in**: the freshness-optimal schedule (:func:`planner.schedules.optimal.refresh_schedule`)
  on the noisy rates, what a planner on unbiased point estimates does;
* **posterior mean**: the same on each page's posterior mean of the log rate, the population's
  true distribution as the prior (an oracle prior: the best any shrinkage can do);
* **expected freshness**: each page's crawl rate maximizes its freshness in expectation over
  that posterior less the bandwidth's multiplier (the Bayes action), the multiplier set so
  that the budget is spent.

Why: with estimated rates the planner keeps a share of the optimum's gain that grows as its
estimates improve (issues 25 and 28). This says what share an estimate noise allows at best,
whatever the planner, so that a measured share can be told apart from a planning loss.
Options: ``--model`` (``loguniform``, ``lognormal``, ``mixture``, ``webfountain``),
``--budget`` (share of pages a period), ``--pages``, ``--sd`` (noise levels), ``--seed``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from planner.schedules.optimal import refresh_schedule
from scenarios.world import WorldSpec, build_world

#: Log-rate grid step of the posterior (natural-log units) and crawl-rate grid size.
_GRID_STEP = 0.05
_F_POINTS = 400


def freshness(f: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Time-averaged freshness of pages changing at ``rate`` crawled at ``f`` a period."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = rate / f
        return np.where(f > 0, -np.expm1(-x) / x, 0.0)


def optimal(rate: np.ndarray, bandwidth: float) -> np.ndarray:
    """Crawl rates of the freshness-optimal schedule for ``rate``."""
    return refresh_schedule(rate, bandwidth=bandwidth, objective="freshness").refresh_rate


def bayes_action(post: np.ndarray, grid: np.ndarray, bandwidth: float) -> np.ndarray:
    """Crawl rates maximizing expected freshness under ``post`` (pages x grid) less mu f."""
    f = np.concatenate([[0.0], np.geomspace(1e-5, 5.0, _F_POINTS)])
    value = post @ freshness(f[None, :], np.exp(grid)[:, None])  # (pages, F)
    lo, hi = 0.0, 10.0
    for _ in range(60):  # bisection on the multiplier until the budget is spent
        mu = 0.5 * (lo + hi)
        spent = f[np.argmax(value - mu * f[None, :], axis=1)].sum()
        lo, hi = (mu, hi) if spent > bandwidth else (lo, mu)
    return f[np.argmax(value - hi * f[None, :], axis=1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="loguniform")
    parser.add_argument("--budget", type=float, default=0.05)
    parser.add_argument("--pages", type=int, default=4000)
    parser.add_argument("--sd", type=float, nargs="+", default=[0.2, 0.3, 0.5, 0.7, 1.0, 1.3])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    spec = replace(WorldSpec(), pages=args.pages, rate_model=args.model, section_sigma=0.0)
    rate = build_world(spec, args.seed, 1).rate
    bandwidth = args.budget * rate.size
    uniform = freshness(np.full(rate.size, args.budget), rate).mean()
    best = freshness(optimal(rate, bandwidth), rate).mean()

    def share(f: np.ndarray) -> float:
        return float((freshness(f, rate).mean() - uniform) / (best - uniform))

    theta = np.log(rate)
    grid = np.arange(theta.min() - 1.0, theta.max() + 1.0, _GRID_STEP)
    # the oracle prior: the population's own log rates, binned on the grid
    prior = np.bincount(np.searchsorted(grid, theta), minlength=grid.size)[: grid.size]
    prior = prior / prior.sum()
    rng = np.random.default_rng(args.seed)
    print(
        f"{args.model}, {rate.size:,} pages, budget {args.budget:g} of the pages a period: "
        f"uniform {uniform:.4f}, optimum {best:.4f}"
    )
    print("| noise sd (ln) | plug-in | posterior mean | expected freshness |")
    print("|---:|---:|---:|---:|")
    for sd in args.sd:
        seen = theta + sd * rng.standard_normal(theta.size)
        post = prior[None, :] * np.exp(-0.5 * ((grid[None, :] - seen[:, None]) / sd) ** 2)
        post /= post.sum(axis=1, keepdims=True)
        plug = share(optimal(np.exp(seen), bandwidth))
        mean = share(optimal(np.exp(post @ grid), bandwidth))
        bayes = share(bayes_action(post, grid, bandwidth))
        print(f"| {sd:g} | {plug:.0%} | {mean:.0%} | {bayes:.0%} |")


if __name__ == "__main__":
    main()

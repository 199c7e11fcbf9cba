"""Probing the pages seen changing at every fetch: does an extra, short-interval fetch pay?

Run as a script::

    python tests/benchmarks/probe_censored.py [--worlds NAME ...] [--budgets 28 14 7]
        [--seeds 1 2] [--pages 10000] [--share 0.1] [--horizon 28]

A page that changed in every interval the crawl has seen is censored: its likelihood rises
with the rate without bound, and the estimate sits where the prior bends it (issue 25's
largest gap: told those pages' true rates, the planner's share on "mixture, sections" at
1/14 went from 19 % to 84 %). A fetch soon after the last one tells a fast page from a
moderate one. This measures two ways of spending crawls on such probes, as wrappers around
the planner as deployed (``webfountain`` on its own estimates), beside it, uniform and the
freshness-optimal schedule with true rates (the scale), on issue 25's worlds
(``estimated_shares.py``):

* ``blanket``: every censored page, once, one period after a fetch, up to ``share`` of each
  period's budget;
* ``value``: the censored pages whose probe is worth its crawl, by the value of information:
  with a log-uniform prior over 1e-4 to 30 changes a period and the page's intervals (all
  changed), the expected freshness of the best crawl rate after the probe's outcome, less
  that before, over ``horizon`` periods, against the crawl's price ``mu`` (the freshness
  schedule's multiplier on the planner's estimates, Cho and Garcia-Molina's condition
  ``1 - (1 + x) e^-x = mu rate``, ``x`` = changes per crawl interval), up to a third of the
  budget.

A probe replaces one of the planner's re-crawls of the period, the one least likely to
find a change by the planner's own estimates (new pages are never displaced). It prints
freshness and the share of the optimum's gain over uniform, ``(policy - uniform) /
(optimum - uniform)``, means over the seeds, and the probes spent. Pure simulation: about
2 minutes per world and budget at 10,000 pages and two seeds. The figures and what they say:
docs/benchmarks.md, "Probing the pages seen changing at every fetch".
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import numpy.typing as npt
from estimated_shares import GENERATED, PERIODS, SHIPPED, WARMUP, world_spec

from estimators.evidence import ChangeIntervals
from scenarios.policies import make_policy
from scenarios.policies.base import Policy
from scenarios.simulator import CrawlLog, Observations, SimulationSettings, simulate
from scenarios.world import build_world

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: The rate grid of the value-of-information posteriors, changes per period.
RATES = np.exp(np.linspace(np.log(1e-4), np.log(30.0), 80))
#: Crawl rates the value of information chooses among, crawls per period (0: none).
CRAWL_RATES = np.concatenate([[0.0], np.exp(np.linspace(np.log(1e-3), 0.0, 50))])
#: x on a grid, and g(x) = 1 - (1 + x) e^-x, to invert the freshness condition.
_X = np.exp(np.linspace(np.log(1e-6), np.log(60.0), 4000))
_G = -np.expm1(-_X) - _X * np.exp(-_X)


def freshness(rate: FloatArray, crawl_rate: FloatArray) -> FloatArray:
    """Time-averaged freshness of a page of ``rate`` crawled ``crawl_rate`` times a period at
    even intervals, ``(1 - e^-x) / x`` with ``x = rate / crawl_rate`` (0 when not crawled);
    the arguments broadcast."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = rate / crawl_rate
        return np.where(crawl_rate > 0, -np.expm1(-x) / x, 0.0)


def multiplier(rate: FloatArray, budget: float) -> float:
    """The freshness schedule's multiplier ``mu`` that spends ``budget`` crawls a period on
    pages of ``rate`` (bisection on a log scale): the freshness one more crawl a period buys."""
    rate = rate[np.isfinite(rate) & (rate > 0)]

    def spend(mu: float) -> float:
        t = mu * rate
        ok = t < 1.0  # faster pages get no crawl
        return float(np.sum(rate[ok] / np.interp(t[ok], _G, _X)))

    low, high = 1e-8, 1e8
    for _ in range(80):
        mid = float(np.sqrt(low * high))
        low, high = (mid, high) if spend(mid) > budget else (low, mid)
    return float(np.sqrt(low * high))


def best_value(posterior: FloatArray, mu: float) -> FloatArray:
    """``max over crawl rates f of E[freshness] - mu f`` for each row of ``posterior``
    (probabilities over :data:`RATES`, shape (m, rates)), shape (m,)."""
    fresh = freshness(RATES[None, :], CRAWL_RATES[:, None])  # (crawl rates, rates)
    return np.asarray((posterior @ fresh.T - mu * CRAWL_RATES[None, :]).max(axis=1))


class Probing(Policy):
    """The planner's choices, with probes of its censored pages in place of its last ones."""

    def __init__(
        self, inner: Policy, name: str, *, share: float = 0.0, horizon: float = 0.0
    ) -> None:
        self.inner = inner
        self.name = name
        self.share = share  # blanket probes: up to this share of the budget
        self.horizon = horizon  # probes by value: periods the knowledge is used
        self.probed: npt.NDArray[np.bool_] | None = None
        self.probes = 0

    def start(self, log: CrawlLog) -> None:
        self.inner.start(log)
        self.probed = np.zeros(log.n_pages, dtype=bool)

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        self.inner.observe(obs, log)

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        chosen = np.asarray(self.inner.select(period, budget, log), dtype=np.int64)
        intervals = log.change_intervals()
        if intervals.page.size == 0:
            return chosen
        n = log.n_pages
        seen = np.bincount(intervals.page, minlength=n)
        changed = np.bincount(intervals.page, weights=intervals.changed, minlength=n)
        elapsed = log.elapsed(float(period))
        censored = log.eligible & (seen >= 1) & (changed == seen) & np.isfinite(elapsed)
        censored[chosen] = False
        probes = self._blanket(censored, elapsed, budget) if self.share else None
        if self.horizon:
            probes = self._by_value(censored, elapsed, intervals, budget, log)
        if probes is None or probes.size == 0:
            return chosen
        self.probes += probes.size
        return np.concatenate([self._displace(chosen, budget - probes.size, log), probes])

    def _displace(self, chosen: IntArray, room: int, log: CrawlLog) -> IntArray:
        """``chosen`` cut to ``room`` pages: the re-crawls least likely to find a change go
        (by the planner's estimates and the time since their last fetch); new pages stay."""
        if chosen.size <= room:
            return chosen
        rate = np.asarray(getattr(self.inner, "_rate", np.zeros(log.n_pages)), dtype=float)
        elapsed = log.elapsed(float(log.period))[chosen]
        with np.errstate(invalid="ignore"):
            stale = -np.expm1(-np.nan_to_num(rate[chosen], nan=0.0) * elapsed)
        stale = np.where(log.fetches[chosen] == 0, 2.0, np.nan_to_num(stale, nan=1.0))
        keep = np.sort(np.argsort(-stale, kind="stable")[: max(room, 0)])
        return chosen[keep]

    def _blanket(
        self, censored: npt.NDArray[np.bool_], elapsed: FloatArray, budget: int
    ) -> IntArray:
        assert self.probed is not None
        # fetched in the period before (slot times: elapsed in (0, 1]), never probed
        page = np.flatnonzero(censored & (elapsed <= 1.0) & ~self.probed)
        page = page[: int(self.share * budget)]
        self.probed[page] = True
        return page.astype(np.int64)

    def _by_value(
        self,
        censored: npt.NDArray[np.bool_],
        elapsed: FloatArray,
        intervals: ChangeIntervals,
        budget: int,
        log: CrawlLog,
    ) -> IntArray | None:
        rate = getattr(self.inner, "_rate", None)  # the planner's estimates at its last plan
        page = np.flatnonzero(censored)
        if rate is None or np.size(rate) != log.n_pages or page.size == 0:
            return None
        mu = multiplier(np.asarray(rate)[log.eligible], budget)
        # the log-likelihood of each page's intervals, all changed, over RATES: (m, rates)
        iv_page, length = intervals.page, intervals.length
        mine = np.isin(iv_page, page)
        row = np.searchsorted(page, iv_page[mine])
        loglik = np.zeros((page.size, RATES.size))
        np.add.at(loglik, row, np.log(-np.expm1(-np.outer(length[mine], RATES))))
        post = np.exp(loglik - loglik.max(axis=1, keepdims=True))
        post /= post.sum(axis=1, keepdims=True)
        gap = np.ceil(elapsed[page] - 1e-9).clip(1.0, None)  # the probe's interval, now
        if_changed = post * -np.expm1(-np.outer(gap, RATES))
        if_not = post - if_changed
        p_changed, p_not = if_changed.sum(axis=1), if_not.sum(axis=1)
        after = p_changed * best_value(
            if_changed / np.maximum(p_changed, 1e-300)[:, None], mu
        ) + p_not * best_value(if_not / np.maximum(p_not, 1e-300)[:, None], mu)
        worth = (after - best_value(post, mu)) * self.horizon - mu
        order = np.argsort(-worth)[: budget // 3]
        return page[order[worth[order] > 0]].astype(np.int64)


def run(
    name: str, pages: int, every: int, seed: int, share: float, horizon: float
) -> dict[str, float]:
    """Freshness of uniform, the optimum, the planner and the two probing planners, and the
    probes each spent (``... probes``)."""
    spec = world_spec(name, pages)
    world = build_world(spec, seed, WARMUP + PERIODS)
    budget = max(1, round(spec.pages / every))
    out: dict[str, float] = {}
    labels = ["uniform", "optimum", "planner", "blanket", "value"]
    for label in labels:
        kind = {"uniform": {"kind": "uniform"}, "optimum": {"kind": "freshness", "rates": "true"}}
        policy: Policy = make_policy(
            {**kind.get(label, {"kind": "webfountain"}), "name": label},
            period_days=spec.period_days,
        )
        if label in ("blanket", "value"):
            policy = Probing(
                policy,
                label,
                share=share if label == "blanket" else 0.0,
                horizon=horizon if label == "value" else 0.0,
            )
        settings = SimulationSettings(
            periods=PERIODS, budget=budget, warmup=WARMUP, oracle=label == "optimum", seed=seed
        )
        out[label] = float(simulate(world, policy, settings).summary()["freshness"])
        if isinstance(policy, Probing):
            out[f"{label} probes"] = float(policy.probes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--worlds",
        nargs="+",
        default=["mixture, sections", "box, dates mixed", "gap-mixture", "lifetimes v2, births"],
    )
    parser.add_argument("--budgets", nargs="+", type=int, default=[28, 14, 7])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--share", type=float, default=0.1)
    parser.add_argument("--horizon", type=float, default=28.0)
    args = parser.parse_args()
    unknown = sorted(set(args.worlds) - set(SHIPPED) - set(GENERATED))
    if unknown:
        parser.error(f"unknown worlds {unknown}: use {[*SHIPPED, *GENERATED]}")
    print(
        f"| world, budget | uniform | optimum | planner | blanket ({args.share:g} of the budget) "
        f"| by value ({args.horizon:g} periods) | probes: blanket / by value |"
    )
    print("|---" * 7 + "|")
    for name in args.worlds:
        for every in args.budgets:
            t0 = time.perf_counter()
            runs = [run(name, args.pages, every, s, args.share, args.horizon) for s in args.seeds]
            m = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
            gain = m["optimum"] - m["uniform"]

            def cell(label: str, m: dict[str, float] = m, gain: float = gain) -> str:
                return f"{m[label]:.4f} ({(m[label] - m['uniform']) / gain:.0%})"

            print(
                f"| {name} 1/{every} | {m['uniform']:.4f} | {m['optimum']:.4f} "
                f"| {cell('planner')} | {cell('blanket')} | {cell('value')} "
                f"| {m['blanket probes']:,.0f} / {m['value probes']:,.0f} |"
                f" <!-- {time.perf_counter() - t0:.0f} s -->",
                flush=True,
            )


if __name__ == "__main__":
    main()

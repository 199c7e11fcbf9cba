"""Follow-up probes: one more crawl a short delay after a page's planned crawl. A prototype.

Run as a script::

    python tests/benchmarks/follow_up_probes.py [--worlds NAME ...] [--budgets 28 14]
        [--seeds 1 2] [--pages 10000] [--warmup 112 --periods 56] [--rule censored]
        [--charge urgent]

A page seen changed in every interval so far has a likelihood flat above about one change
per interval: at a budget of every page once in 28 periods it cannot tell a page changing
every 5 periods (worth crawling more) from one changing every period (worth no crawl). The
planner's probes (two crawls now, taken when their knowledge gradient pays for both over
``plan.probe_horizon``) almost never pay at such budgets. A follow-up costs one crawl: the
page's next planned crawl, chosen by the plan anyway, is its first, and one more crawl
``0.5 / c`` later (``c``, the cut-off rate ``1 / price`` of the Bayes plan; at least a
period) its second. Each page is followed up at most once at that scale: only while its
shortest interval is over twice the delay.

Which pages (``--rule``):

* ``censored``: every page whose intervals all held a change;
* ``censored twice``: the same, once it has at least two intervals;
* ``pays``: the pages whose posterior straddles the cut-off and whose follow-up's knowledge
  gradient over ``plan.probe_horizon`` exceeds the price of one crawl.

The second crawls go through the policy's probe lane, charged to the plan's quotas as the
service charges urgent crawls (``planner.cycle.quotas.charge_spent``: each quota, the new
pages' too, gives up crawls in proportion to its size); with ``--charge own``, to their own
pages' classes (the new pages' quota untouched). The wrapper reads the policy's
private state; it is not the planner's. It prints, per world, budget and seed, uniform, the
freshness-optimal schedule with true rates (the scale), the planner as deployed and the
planner with follow-ups, with the share of the optimum's gain over uniform, and the
follow-up crawls spent. The planner runs with its own follow-ups off (``follow_ups =
false``, the default; built in since 2026-12-08, they value a follow-up over what the
page's planned crawl teaches anyway and cap the marks). Pure simulation: 1 to 4 minutes a
world, budget and seed in the steady state (112 periods of warm-up, 56 measured) at 10,000
pages. The figures: docs/benchmarks.md, "Follow-up probes".
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
from estimated_shares import (
    GENERATED,
    POLICIES,
    SHIPPED,
    freshness,
    mean_over_seeds,
    parse_world_args,
    share_of_gain,
    world_spec,
)

import estimators.bayes_action as bayes_action
from scenarios.policies import make_policy
from scenarios.simulator import CrawlLog
from scenarios.world import build_world

IntArray = npt.NDArray[np.int64]

#: A follow-up's delay, times the cut-off rate's time ``1 / c`` (the plan's price).
DELAY = 0.5


class FollowUps:
    """Wraps a ``webfountain`` policy so that its planned crawls of the chosen pages are
    followed up (module docstring). ``spent``: follow-up crawls queued."""

    def __init__(self, policy: Any, rule: str, charge: str = "urgent", sample: float = 1.0) -> None:
        self.policy, self.rule, self.charge, self.sample = policy, rule, charge, sample
        self.price = float("nan")
        self.pays = np.zeros(0, np.bool_)
        self.due: dict[int, IntArray] = {}
        self.spent = 0
        self._select = policy.select
        policy.select = self.select
        self._wrap_knowledge()

    def _wrap_knowledge(self) -> None:
        """Record each refit's price and, for ``pays``, the pages whose follow-up pays:
        the refit calls :func:`estimators.bayes_action.choose_probes` with every page's
        posterior."""
        choose = bayes_action.choose_probes

        def recording(plan: Any, posterior: Any, horizon: float, **kw: Any) -> Any:
            self.price = float(plan.price)
            if self.rule == "pays":
                pays = np.zeros(posterior.shape[0], np.bool_)
                straddle = bayes_action.straddling(plan, posterior)
                if straddle.size:
                    gain = bayes_action.probe_gains(
                        plan.grid, posterior[straddle], plan.price, self.delay()
                    )
                    pays[straddle[gain * horizon > plan.price]] = True
                self.pays = pays
            return choose(plan, posterior, horizon, **kw)

        bayes_action.choose_probes = recording  # the knowledge module looks it up per call

    def delay(self) -> int:
        """The follow-up's delay, whole periods (the simulator's clock), at least one."""
        return max(1, round(DELAY * self.price)) if np.isfinite(self.price) else 1

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        policy = self.policy
        second = self.due.pop(period, np.zeros(0, np.int64))
        if self.charge == "own":
            chosen = self._own_charge(second[log.eligible[second]], period, budget, log)
        else:
            if second.size:  # into the probe lane: charged to the quotas as urgent crawls
                lane = policy._probe_second
                lane[period] = np.union1d(lane.get(period, second[:0]), second)
            chosen = np.asarray(self._select(period, budget, log), dtype=np.int64)
        lane_now = [second, *policy._probe_second.values(), policy._probe_first]
        planned = chosen[~np.isin(chosen, np.concatenate(lane_now))]
        follow = planned[self._chosen(planned, log)]
        if follow.size:
            later = period + self.delay()
            self.due[later] = np.union1d(self.due.get(later, follow[:0]), follow)
            self.spent += int(follow.size)
        return chosen

    def _own_charge(self, second: IntArray, period: int, budget: int, log: CrawlLog) -> IntArray:
        """The period's crawls with the follow-ups' second crawls ``second`` charged to
        their own pages' classes (what a class cannot give, the other classes give in
        proportion to their quotas; the new pages' quota never)."""
        policy = self.policy
        if policy._cycle_start < 0 or period - policy._cycle_start >= policy.cycle:
            policy._plan(log, period, budget)
        k = period - policy._cycle_start
        second = second[policy._bucket[second] > 0]
        saved = policy._old[:, k].copy()
        if second.size:
            counts = np.bincount(policy._bucket[second], minlength=saved.size)[: saved.size]
            take = np.minimum(saved, counts)
            left = saved - take
            excess = int(counts.sum() - take.sum())
            if excess and left[1:].sum() > 0:
                left[1:] -= np.minimum(
                    left[1:], np.ceil(left[1:] * excess / left[1:].sum()).astype(left.dtype)
                )
            policy._old[:, k] = left
        try:
            chosen = np.asarray(self._select(period, budget - second.size, log), np.int64)
        finally:
            policy._old[:, k] = saved
        return np.concatenate([second, chosen[~np.isin(chosen, second)]])[:budget]

    def _chosen(self, pages: IntArray, log: CrawlLog) -> npt.NDArray[np.bool_]:
        """Which of ``pages`` (planned this period) to follow up."""
        intervals = log.change_intervals()
        n = log.n_pages
        count = np.bincount(intervals.page, minlength=n)
        changed = np.bincount(intervals.page, weights=intervals.changed, minlength=n)
        shortest = np.full(n, np.inf)
        np.minimum.at(shortest, intervals.page, intervals.length)
        wide = (shortest[pages] > 2 * self.delay()) & (self.policy._bucket[pages] > 0)
        if self.sample < 1.0:  # a fixed share of the pages, by a hash of their index
            wide &= (pages * 2654435761) % 2**32 < self.sample * 2**32
        if self.rule in ("censored", "censored twice"):
            least = 2 if self.rule == "censored twice" else 1
            return wide & (count[pages] >= least) & (changed[pages] == count[pages])
        pays = np.zeros(n, np.bool_)
        pays[: min(n, self.pays.size)] = self.pays[:n]
        return wide & pays[pages]


def run(
    name: str,
    pages: int,
    every: int,
    seed: int,
    rule: str,
    warmup: int,
    periods: int,
    charge: str = "urgent",
    sample: float = 1.0,
) -> dict[str, float]:
    """Freshness of uniform, the optimum, the planner and the planner with follow-ups, and
    the follow-ups spent, on world ``name`` at every page once in ``every`` periods."""
    spec = world_spec(name, pages)
    world = build_world(spec, seed, warmup + periods)
    budget = max(1, round(spec.pages / every))
    out: dict[str, float] = {}
    original = bayes_action.choose_probes
    for label, policy_name in [
        ("uniform", "uniform"),
        ("optimum", "optimum"),
        ("planner", "planner"),
        ("follow-ups", "planner"),
    ]:
        spec_policy = POLICIES[policy_name]  # the planner's own follow-ups off (the default)
        policy = make_policy({**spec_policy, "name": label}, period_days=spec.period_days)
        wrapper = FollowUps(policy, rule, charge, sample) if label == "follow-ups" else None
        try:
            out[label] = freshness(world, policy, spec_policy, budget, warmup, periods, seed)
        finally:
            bayes_action.choose_probes = original
        if wrapper is not None:
            out["spent"] = float(wrapper.spent)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", nargs="+", default=[*SHIPPED, *GENERATED])
    parser.add_argument("--budgets", nargs="+", type=int, default=[28, 14])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=112)
    parser.add_argument("--periods", type=int, default=56)
    parser.add_argument(
        "--rule", choices=["censored", "censored twice", "pays"], default="censored"
    )
    parser.add_argument(
        "--charge",
        choices=["urgent", "own"],
        default="urgent",
        help="second crawls charged as the service's urgent crawls, or to their own classes",
    )
    parser.add_argument(
        "--sample", type=float, default=1.0, help="share of the pages ever followed up"
    )
    args = parse_world_args(parser)
    print("| world, budget | uniform | optimum | planner (share) | follow-ups (share) | spent |")
    print("|---|---|---|---|---|---|")
    for name in args.worlds:
        for every in args.budgets:
            m = mean_over_seeds(
                f"{name} 1/{every}",
                args.seeds,
                partial(
                    run,
                    name,
                    args.pages,
                    every,
                    rule=args.rule,
                    warmup=args.warmup,
                    periods=args.periods,
                    charge=args.charge,
                    sample=args.sample,
                ),
            )
            print(
                f"| {name} 1/{every} | {m['uniform']:.4f} | {m['optimum']:.4f} | "
                f"{m['planner']:.4f} ({share_of_gain(m, 'planner'):.0%}) | "
                f"{m['follow-ups']:.4f} ({share_of_gain(m, 'follow-ups'):.0%}) | "
                f"{m['spent']:,.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

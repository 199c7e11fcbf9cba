"""The priced start: the per-bucket dynamic program, the master LP's start, its feasibility."""

from __future__ import annotations

import itertools

import numpy as np

from planner.model.instance import CrawlInstance
from planner.model.paper_instances import paper_instance
from planner.model.webfountain import simulate, uniform_crawl
from planner.model.weights import ObjectiveWeights, strategy_weights
from planner.solver.plan_solver import PlanSolver
from planner.solver.start_point import best_schedules, objective_of, priced_start


def _schedule_value(
    inst: CrawlInstance,
    w: ObjectiveWeights,
    before: np.ndarray,
    cost: np.ndarray,
    i: int,
    f: np.ndarray,
) -> float:
    y, total = inst.y0[i], 0.0
    for t in range(inst.periods):
        y = (1 - f[t]) * ((1 - inst.a[i, t]) * y + inst.a[i, t] * before[i, t])
        total += w.oldwt[i, t] * y + cost[i, t] * f[t]
    return float(total)


def test_dynamic_program_matches_brute_force() -> None:
    inst = paper_instance(2, periods=5, buckets=4)
    rng = np.random.default_rng(3)
    for strategy in (1, 2, 3):
        w = strategy_weights(strategy, 4, 5)
        before = inst.b0[:, None] * rng.uniform(1.0, 1.1, size=(4, 5))
        cost = rng.uniform(0.0, 0.3, size=(4, 5)) * before
        best = best_schedules(inst, w, before, cost)
        for i in range(4):
            brute = min(
                _schedule_value(inst, w, before, cost, i, np.array(f))
                for f in itertools.product((0.0, 1.0), repeat=5)
            )
            found = _schedule_value(inst, w, before, cost, i, best[i])
            assert found <= brute * (1 + 1e-12) + 1e-9


def test_priced_start_is_feasible_and_beats_the_uniform_crawl() -> None:
    inst = paper_instance(1, periods=6, buckets=40)
    for strategy in (1, 2, 3):
        w = strategy_weights(strategy, 40, 6)
        uniform = uniform_crawl(inst)
        start = priced_start(inst, w, uniform)
        traj = start.trajectory
        assert start.objective == objective_of(traj, w) <= objective_of(uniform, w)
        # Every equation holds (it is a forward simulation) and every period fits its time.
        again = simulate(inst, traj.x, traj.z)
        np.testing.assert_allclose(again.y, traj.y, rtol=1e-12, atol=1e-6)
        load = np.sum(inst.crawl_cost * traj.x, axis=0) + inst.new_crawl_cost * traj.z
        assert np.all(load <= inst.capacity * (1 + 1e-9))
        before, n_before = traj.before(inst)
        assert np.all(traj.x <= before * (1 + 1e-12)) and np.all(traj.z <= n_before + 1e-6)
        assert np.all(start.prices >= 0) and start.lp_rounds >= 1


def test_cold_solve_starts_from_the_priced_start() -> None:
    inst = paper_instance(1, periods=4, buckets=24)  # 6 buckets per period: priced first
    sol = PlanSolver(inst, 1).solve(starts=2)
    assert sol.status.ok
    assert [s.name for s in sol.starts] in (["priced", "uniform"], ["uniform", "priced"])
    assert PlanSolver(inst, 1).solve().starts[0].name == "priced"

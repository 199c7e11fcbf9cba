"""Solve the WebFountain model for an instance: build once, re-solve, warm start, several starts.

:class:`PlanSolver` owns one Pyomo model (:mod:`planner.model.webfountain`) and its compiled bridge
(:mod:`planner.solver.compiler`). :meth:`PlanSolver.update` changes data or weights without
rebuilding; :meth:`PlanSolver.solve` returns a :class:`PlanSolution`.

**Where Ipopt starts.** A cold solve starts from the column-generation start of
:mod:`planner.solver.start_point` ("priced": every bucket's best 0/1 schedule under crawl-time
prices from a master LP), with :data:`planner.solver.ipopt.NEAR_START_OPTIONS` (a small
barrier parameter: the start is near an optimum), when the instance has at least
:data:`PRICED_FIRST_BUCKETS_PER_PERIOD` buckets per period; otherwise, or if that start
cannot be computed or is not better than the uniform crawl, from the uniform crawl with
:data:`planner.solver.ipopt.PLANNER_OPTIONS` (the priced start is then the second of
``starts``).

**Which optimum.** The model is nonconvex (equation (2) is bilinear in x and y and divides by
b), so Ipopt returns a local optimum. ``starts > 1`` solves again from other feasible crawls
(uniform, proportional to change, and seeded random fractions, all simulated forward so they
satisfy every equation), keeps the best and reports every start's objective: when they agree to
``spread`` (relative), the plan does not depend on where Ipopt started. This is evidence, not a
proof of global optimality.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.model.instance import CrawlInstance
from planner.model.webfountain import (
    Trajectory,
    build_model,
    initialize_model,
    read_trajectory,
    set_data,
    simulate,
    uniform_crawl,
)
from planner.model.weights import ObjectiveWeights, Strategy, strategy_weights
from planner.solver.compiler import CompiledNLP, compile_model
from planner.solver.ipopt import (
    NEAR_START_OPTIONS,
    PLANNER_OPTIONS,
    IpoptOutcome,
    SolveStatus,
    solve_nlp,
)
from planner.solver.start_point import priced_start

__all__ = [
    "PRICED_FIRST_BUCKETS_PER_PERIOD",
    "PlanSolution",
    "PlanSolver",
    "StartOutcome",
    "solve_plan",
    "start_points",
]

#: The priced start goes first when there are at least this many buckets per period. Its master
#: LP mixes schedules in up to T buckets, which the start rounds: with few buckets that is much
#: of the plan (B = 20, T = 14: local optima 0.1-1.1% worse than from the uniform crawl; B = 60
#: and 255: 0.3-3.8% better, docs/model.md).
PRICED_FIRST_BUCKETS_PER_PERIOD = 4


@dataclass(frozen=True)
class StartOutcome:
    """One start of a multi-start solve: where it began and where Ipopt ended."""

    name: str
    status: SolveStatus
    objective: float
    iterations: int
    seconds: float


@dataclass(frozen=True)
class PlanSolution:
    """The outcome of planning one cycle.

    Attributes
    ----------
    status : SolveStatus
        Of the best start (``status.ok`` when the plan can be used).
    message : str
        Ipopt's message, or why the instance is infeasible.
    objective : float
        Weighted obsolete and new uncrawled pages (the model's objective) at the plan.
    trajectory : Trajectory
        x, y, b [B, T], n, z [T] of the best start.
    iterations : int
        Ipopt iterations of the best start.
    build_seconds, solve_seconds : float
        Model build and compilation; all Ipopt runs of this solve.
    starts : tuple of StartOutcome
        Every start tried, best first.
    spread : float
        Relative difference between the worst and the best objective over the starts that
        ended ``ok`` (0 with one start).
    weights : str
        Label of the objective weights ("strategy 1", "user").
    """

    status: SolveStatus
    message: str
    objective: float
    trajectory: Trajectory
    iterations: int
    build_seconds: float
    solve_seconds: float
    starts: tuple[StartOutcome, ...]
    spread: float
    weights: str

    def crawl_fractions(self, instance: CrawlInstance) -> np.ndarray:
        """x[i,t] / b[i,t-1]: the share of bucket i to crawl in period t, shape (B, T)."""
        before, _ = self.trajectory.before(instance)
        return np.asarray(self.trajectory.x / before, dtype=float)


def start_points(
    instance: CrawlInstance, count: int, seed: int = 0
) -> list[tuple[str, Trajectory]]:
    """``count`` feasible starting crawls: uniform, change-proportional, then seeded random."""
    uniform = uniform_crawl(instance)
    points = [("uniform", uniform)]
    if count > 1:
        # Same crawls per period as uniform, shared in proportion to expected changes a * b.
        share = instance.a * instance.b0[:, None]
        share = share / np.maximum(share.sum(axis=0, keepdims=True), 1e-300)
        x = share * uniform.x.sum(axis=0, keepdims=True)
        points.append(("change-proportional", simulate(instance, x, uniform.z)))
    rng = np.random.default_rng(seed)
    while len(points) < count:
        weights = rng.uniform(0.2, 1.0, size=instance.a.shape)
        x = uniform.x * weights
        points.append((f"random-{len(points) - 1}", simulate(instance, x, uniform.z * 0.8)))
    return points[:count]


class PlanSolver:
    """The WebFountain model for one (B, T), ready to solve and re-solve.

    Parameters
    ----------
    instance : CrawlInstance
    weights : ObjectiveWeights or Strategy or int
        The objective; a strategy number picks :func:`planner.model.weights.strategy_weights`.
    options : mapping
        Ipopt options for every start. Default: :data:`planner.solver.ipopt.NEAR_START_OPTIONS`
        from the priced start, :data:`planner.solver.ipopt.PLANNER_OPTIONS` from the others.
    use_scaling : bool
        Hand the model's scaling factors to Ipopt.
    """

    def __init__(
        self,
        instance: CrawlInstance,
        weights: ObjectiveWeights | Strategy | int = Strategy.COMPROMISE,
        *,
        options: dict[str, object] | None = None,
        use_scaling: bool = True,
    ) -> None:
        t0 = time.perf_counter()
        self.instance = instance
        self.weights = self._weights(weights, instance)
        self.options = None if options is None else dict(options)
        self.use_scaling = use_scaling
        self.model = build_model(instance, self.weights)
        self.nlp: CompiledNLP = compile_model(self.model)
        self.build_seconds = time.perf_counter() - t0

    @staticmethod
    def _weights(
        weights: ObjectiveWeights | Strategy | int, instance: CrawlInstance
    ) -> ObjectiveWeights:
        if isinstance(weights, ObjectiveWeights):
            return weights
        return strategy_weights(weights, instance.buckets, instance.periods)

    def update(
        self,
        instance: CrawlInstance | None = None,
        weights: ObjectiveWeights | Strategy | int | None = None,
    ) -> None:
        """Change the data or the weights (same B and T) without rebuilding."""
        self.instance = self.instance if instance is None else instance
        if weights is not None:
            self.weights = self._weights(weights, self.instance)
        set_data(self.model, self.instance, self.weights)
        self.nlp.refresh_parameters()

    def _run(self, name: str, start: Trajectory) -> IpoptOutcome:
        initialize_model(self.model, self.instance, start)
        options = self.options
        if options is None:
            options = dict(NEAR_START_OPTIONS if name == "priced" else PLANNER_OPTIONS)
        return solve_nlp(self.nlp, None, options, use_scaling=self.use_scaling)

    def _points(self, count: int, seed: int) -> list[tuple[str, Trajectory]]:
        """The priced start, then :func:`start_points`; with fewer than
        :data:`PRICED_FIRST_BUCKETS_PER_PERIOD` buckets per period the uniform crawl first."""
        points = start_points(self.instance, count, seed)
        uniform = points[0][1]
        first = self.instance.buckets >= PRICED_FIRST_BUCKETS_PER_PERIOD * self.instance.periods
        if count == 1 and not first:
            return points
        try:
            priced = priced_start(self.instance, self.weights, uniform)
        except (RuntimeError, ValueError, FloatingPointError):  # pragma: no cover - LP trouble
            return points
        if priced.trajectory is uniform:  # not better than the uniform crawl
            return points
        start = ("priced", priced.trajectory)
        return ([start, *points] if first else [points[0], start, *points[1:]])[:count]

    def solve(
        self, warm_start: Trajectory | None = None, *, starts: int = 1, seed: int = 0
    ) -> PlanSolution:
        """Solve from ``warm_start`` (a previous plan, re-simulated on the current data) or the
        priced start (module docstring), and from ``starts - 1`` further feasible crawls (the
        uniform crawl first); keep the best."""
        if starts < 1:
            raise ValueError("starts must be >= 1")
        points = self._points(starts, seed)
        if warm_start is not None:
            points = [("warm", warm_start), *points[: starts - 1]]
        t0 = time.perf_counter()
        outcomes: list[tuple[StartOutcome, IpoptOutcome]] = []
        for name, start in points:
            out = self._run(name, start)
            summary = StartOutcome(name, out.status, out.objective, out.iterations, out.seconds)
            outcomes.append((summary, out))
        solve_seconds = time.perf_counter() - t0
        outcomes.sort(key=lambda pair: (not pair[1].status.ok, pair[1].objective))
        best = outcomes[0][1]
        # Ipopt may end up to bound_relax_factor (1e-8) outside a bound: f = -1e-8 would be a
        # crawl of -0.5 pages in a bucket of 5e7. The plan honours the bounds exactly.
        self.nlp.load_solution(np.clip(best.x, self.nlp.x_lower, self.nlp.x_upper))
        ok = [o.objective for _, o in outcomes if o.status.ok]
        spread = (max(ok) - min(ok)) / max(abs(min(ok)), 1e-300) if len(ok) > 1 else 0.0
        return PlanSolution(
            status=best.status,
            message=best.message,
            objective=best.objective,
            trajectory=read_trajectory(self.model),
            iterations=best.iterations,
            build_seconds=self.build_seconds,
            solve_seconds=solve_seconds,
            starts=tuple(s for s, _ in outcomes),
            spread=float(spread),
            weights=self.weights.label,
        )


def solve_plan(
    instance: CrawlInstance,
    weights: ObjectiveWeights | Strategy | int = Strategy.COMPROMISE,
    *,
    warm_start: Trajectory | None = None,
    starts: int = 1,
) -> PlanSolution:
    """Build, compile and solve in one call; see :class:`PlanSolver`."""
    return PlanSolver(instance, weights).solve(warm_start, starts=starts)

"""Solve the steady-rate bucket model (:mod:`planner.model.steady_rates`) with Ipopt.

The model is convex (module docstring there), so one start suffices: the uniform crawl, with
:data:`planner.solver.ipopt.PLANNER_OPTIONS`, through the project's bridge
(:mod:`planner.solver.compiler`). :func:`solve_steady` returns a :class:`SteadySolution` with
the crawls as a :class:`planner.model.webfountain.Trajectory` (so the cycle code that turns a
trajectory into quotas serves both models) and the plan's marginal values, which the release
uses to spend a quota it cannot fill.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo

from planner.model.instance import CrawlInstance
from planner.model.steady_rates import (
    SteadySetup,
    build_steady_model,
    change_rates,
    marginal_value,
    period_value,
)
from planner.model.webfountain import Trajectory
from planner.solver.compiler import compile_model
from planner.solver.ipopt import PLANNER_OPTIONS, SolveStatus, solve_nlp

__all__ = ["SteadySolution", "solve_steady"]


@dataclass(frozen=True)
class SteadySolution:
    """One solve of the steady-rate model.

    Attributes
    ----------
    status : SolveStatus
    trajectory : Trajectory
        x [B, T] crawls, b [B, T] pages at each period's end, y [B, T] pages expected stale
        (time-averaged, by the freshness formula whatever the objective), n, z [T].
    marginal : ndarray, shape (B, T)
        Value of one more crawl of bucket i in period t (larger: more worth it).
    new_marginal : ndarray, shape (T,)
        Value of one more new page in period t: the period's capacity price times a new
        page's crawl cost (0 where capacity is not binding).
    objective : float
        The model's objective (its own sense and units).
    freshness : float
        Time-averaged freshness of the pages held, by the plan's own values (0..1).
    iterations : int
    build_seconds, solve_seconds : float
        Model build and compilation; Ipopt.
    message : str
        Ipopt's message.
    """

    status: SolveStatus
    trajectory: Trajectory
    marginal: np.ndarray
    new_marginal: np.ndarray
    objective: float
    freshness: float
    iterations: int
    build_seconds: float
    solve_seconds: float
    message: str


def solve_steady(instance: CrawlInstance, setup: SteadySetup | None = None) -> SteadySolution:
    """Build, compile and solve the steady-rate model for ``instance`` (module docstring)."""
    setup = SteadySetup() if setup is None else setup
    t0 = time.perf_counter()
    model = build_steady_model(instance, setup)
    nlp = compile_model(model)
    build_seconds = time.perf_counter() - t0
    outcome = solve_nlp(nlp, nlp.initial_point(), PLANNER_OPTIONS)
    nlp.load_solution(outcome.x)
    B, T = int(instance.buckets), int(instance.periods)
    x = np.array([float(model.x[i, t].value or 0.0) for i in range(B) for t in range(T)])
    x = np.maximum(x.reshape(B, T), 0.0)
    pages = np.array([float(model.N[i, t].value or 0.0) for i in range(B) for t in range(T)])
    pages = np.maximum(pages.reshape(B, T), 0.0)
    z = np.maximum(np.array([float(model.z[t].value or 0.0) for t in range(T)]), 0.0)
    n = np.maximum(np.array([float(model.n[t].value or 0.0) for t in range(T)]), 0.0)
    lam = change_rates(instance)
    fresh = period_value("freshness", x, pages, lam)
    p = np.asarray(instance.p, dtype=float) if instance.p.size else np.zeros(B)
    end_pages = pages + p[:, None] * z[None, :]
    trajectory = Trajectory(x=x, y=np.maximum(pages - fresh, 0.0), b=end_pages, n=n, z=z)
    w = np.ones(B) if setup.importance is None else np.asarray(setup.importance, dtype=float)
    marginal = w[:, None] * marginal_value(setup.objective, x, pages, lam)
    row_of = {id(c): r for r, c in enumerate(nlp.constraint_data)}
    rows = [row_of[id(model.capacity[t])] for t in range(T)]
    price = np.abs(np.asarray(outcome.constraint_multipliers, dtype=float)[rows])
    new_marginal = price * np.asarray(instance.new_crawl_cost, dtype=float)
    held = float(pages.sum())
    return SteadySolution(
        status=outcome.status,
        trajectory=trajectory,
        marginal=marginal,
        new_marginal=new_marginal,
        objective=float(pyo.value(model.objective)),
        freshness=float(fresh.sum() / held) if held > 0 else 1.0,
        iterations=int(outcome.iterations),
        build_seconds=build_seconds,
        solve_seconds=float(outcome.seconds),
        message=str(outcome.message),
    )

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
    STEADY_OBJECTIVES,
    SteadySetup,
    build_steady_model,
    change_rates,
    marginal_value,
    new_page_values,
    period_value,
)
from planner.model.webfountain import Trajectory
from planner.solver.compiler import compile_model
from planner.solver.ipopt import PLANNER_OPTIONS, SolveStatus, solve_nlp

__all__ = ["CREDIT_PASSES", "CREDIT_TOLERANCE", "STEADY_OPTIONS", "SteadySolution", "solve_steady"]

#: The planner's Ipopt options, with the variables' bounds kept exactly: Ipopt relaxes bounds
#: by 1e-8 by default, and a crawl count a hair below 0 turns e^(-lambda N / x) into an
#: overflow.
STEADY_OPTIONS = {**PLANNER_OPTIONS, "bound_relax_factor": 0.0}

#: The most solves :func:`solve_steady` makes to settle the value of a new page, and the
#: relative change of that value below which it stops.
CREDIT_PASSES = 4
CREDIT_TOLERANCE = 0.02


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
    """Build, compile and solve the steady-rate model for ``instance`` (module docstring).

    For a maximized objective with new pages in view, the value of a crawled new page comes
    from the plan itself (:func:`planner.model.steady_rates.new_page_values`): solved first
    with the value at the uniform crawl, then again from that optimum with the value at it,
    until it moves less than :data:`CREDIT_TOLERANCE` (at most :data:`CREDIT_PASSES` solves).
    """
    setup = SteadySetup() if setup is None else setup
    t0 = time.perf_counter()
    model = build_steady_model(instance, setup)
    nlp = compile_model(model)
    build_seconds = time.perf_counter() - t0
    outcome = solve_nlp(nlp, nlp.initial_point(), STEADY_OPTIONS)
    seconds, iterations = outcome.seconds, outcome.iterations
    refine = (
        STEADY_OBJECTIVES[setup.objective]
        and setup.new_value is None
        and setup.lifetime > 0
        and float(np.sum(instance.p)) > 0
    )
    lam = change_rates(instance)
    for _ in range(CREDIT_PASSES - 1):
        if not (refine and outcome.status.ok):
            break
        nlp.load_solution(outcome.x)
        x, pages = _crawls(model, instance)
        value = new_page_values(
            setup.objective,
            x,
            pages,
            lam,
            setup.lifetime,
            setup.rate_shape,
            renewal=setup.renewal,
        )
        w = _weights(setup, int(instance.buckets))
        credit = float((w * np.asarray(instance.p, dtype=float) * value).sum())
        old = float(pyo.value(model.new_credit))
        if abs(credit - old) <= CREDIT_TOLERANCE * max(abs(old), 1e-12):
            break
        model.new_credit.set_value(credit)
        nlp.refresh_parameters()
        outcome = solve_nlp(nlp, outcome.x, STEADY_OPTIONS)
        seconds += outcome.seconds
        iterations += outcome.iterations
    nlp.load_solution(outcome.x)
    B, T = int(instance.buckets), int(instance.periods)
    x, pages = _crawls(model, instance)
    z = np.maximum(np.array([float(model.z[t].value or 0.0) for t in range(T)]), 0.0)
    n = np.maximum(np.array([float(model.n[t].value or 0.0) for t in range(T)]), 0.0)
    renewal = setup.renewal if setup.objective == "freshness" else 0.0
    fresh = period_value("freshness", x, pages, lam, setup.rate_shape, renewal=renewal)
    p = np.asarray(instance.p, dtype=float) if instance.p.size else np.zeros(B)
    end_pages = pages + p[:, None] * z[None, :]
    trajectory = Trajectory(x=x, y=np.maximum(pages - fresh, 0.0), b=end_pages, n=n, z=z)
    w = _weights(setup, B)
    shape = setup.rate_shape if setup.objective == "freshness" else None
    marginal = w[:, None] * marginal_value(
        setup.objective, x, pages, lam, shape, renewal=setup.renewal
    )
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
        iterations=int(iterations),
        build_seconds=build_seconds,
        solve_seconds=float(seconds),
        message=str(outcome.message),
    )


def _weights(setup: SteadySetup, buckets: int) -> np.ndarray:
    if setup.importance is None:
        return np.ones(buckets)
    return np.asarray(setup.importance, dtype=float)


def _crawls(model: pyo.ConcreteModel, instance: CrawlInstance) -> tuple[np.ndarray, np.ndarray]:
    """The model's x and N [B, T] as arrays (negative hairs from the solver as 0)."""
    B, T = int(instance.buckets), int(instance.periods)
    x = np.array([float(model.x[i, t].value or 0.0) for i in range(B) for t in range(T)])
    pages = np.array([float(model.N[i, t].value or 0.0) for i in range(B) for t in range(T)])
    return np.maximum(x.reshape(B, T), 0.0), np.maximum(pages.reshape(B, T), 0.0)

"""Solve a :class:`~planner.solver.compiler.CompiledNLP` with Ipopt through cyipopt.

:class:`SolveStatus` maps Ipopt's return codes in one place (:data:`IPOPT_STATUS`);
:class:`IpoptOutcome` is what a solve returns. The options used by the planner are
:data:`PLANNER_OPTIONS`, explained where they are declared; :data:`DEFAULT_OPTIONS` is Ipopt with
its own defaults (the baseline the benchmark compares against).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cyipopt
import numpy as np

from planner.solver.compiler import CompiledNLP

__all__ = [
    "DEFAULT_OPTIONS",
    "IPOPT_STATUS",
    "NEAR_START_OPTIONS",
    "PLANNER_OPTIONS",
    "IpoptOutcome",
    "SolveStatus",
    "solve_nlp",
]


class SolveStatus(enum.Enum):
    """How a solve ended. Ipopt's codes are mapped in :data:`IPOPT_STATUS`."""

    OPTIMAL = "optimal"
    """A local optimum to the requested tolerance (Ipopt 0, Solve_Succeeded)."""

    ACCEPTABLE = "acceptable"
    """A local optimum to the looser ``acceptable_*`` tolerances (Ipopt 1): usable, not exact."""

    INFEASIBLE = "infeasible"
    """No feasible point: found before the solve by the planner's checks, or by Ipopt
    (2, Infeasible_Problem_Detected; a local certificate only, as the model is nonconvex)."""

    UNBOUNDED = "unbounded"
    """The iterates diverged (Ipopt 4, Diverging_Iterates): the objective has no lower bound."""

    ITERATION_LIMIT = "iteration_limit"
    """``max_iter`` reached (Ipopt -1); the point returned is the last iterate."""

    TIME_LIMIT = "time_limit"
    """``max_cpu_time`` or ``max_wall_time`` reached (Ipopt -4, -5)."""

    NUMERICAL_ERROR = "numerical_error"
    """Ipopt could not make progress: search direction too small (3), restoration failed (-2),
    error in step computation (-3), too few degrees of freedom (-10), invalid number in a
    callback (-13)."""

    ERROR = "error"
    """Anything else: a bad option or problem definition, out of memory, an internal error,
    a user stop (5, 6, -11, -12, -100, -101, -102, -199)."""

    @property
    def ok(self) -> bool:
        """Whether the solution can be used as a plan."""
        return self in (SolveStatus.OPTIMAL, SolveStatus.ACCEPTABLE)


#: Ipopt's ApplicationReturnStatus codes and the status each one means.
IPOPT_STATUS: dict[int, SolveStatus] = {
    0: SolveStatus.OPTIMAL,
    1: SolveStatus.ACCEPTABLE,
    2: SolveStatus.INFEASIBLE,
    3: SolveStatus.NUMERICAL_ERROR,
    4: SolveStatus.UNBOUNDED,
    5: SolveStatus.ERROR,
    6: SolveStatus.ERROR,
    -1: SolveStatus.ITERATION_LIMIT,
    -2: SolveStatus.NUMERICAL_ERROR,
    -3: SolveStatus.NUMERICAL_ERROR,
    -4: SolveStatus.TIME_LIMIT,
    -5: SolveStatus.TIME_LIMIT,
    -10: SolveStatus.NUMERICAL_ERROR,
    -11: SolveStatus.ERROR,
    -12: SolveStatus.ERROR,
    -13: SolveStatus.NUMERICAL_ERROR,
    -100: SolveStatus.ERROR,
    -101: SolveStatus.ERROR,
    -102: SolveStatus.ERROR,
    -199: SolveStatus.ERROR,
}

#: Ipopt with its own defaults (MUMPS, gradient-based scaling, monotone barrier update).
DEFAULT_OPTIONS: Mapping[str, Any] = {}

#: The planner's options. Each is a measured choice (docs/model.md has the figures).
PLANNER_OPTIONS: Mapping[str, Any] = {
    # The bridge hands Ipopt the model's scaling_factor Suffix: obsolete pages of a bucket in
    # units of the bucket, seconds in units of the period's capacity. Gradient-based scaling only
    # looks at the starting point (measured: iteration limit at 1000 on strategy 1).
    "nlp_scaling_method": "user-scaling",
    # Adaptive barrier update (Nocedal, Waechter, Waltz). Measured against the monotone rule
    # (mu_init 1e-2, 1e-3, 1e-4): about as many iterations in total over the three strategies,
    # fewer on strategy 1; the mu oracles "probing" and "loqo" took 600-1000 iterations.
    "mu_strategy": "adaptive",
    # Relative tolerance of the scaled problem; a crawl plan needs about 1e-6 in fractions.
    "tol": 1e-7,
    # The start is a feasible crawl that fills every period's capacity: the slacks of (1) start
    # at 0. Pushing them 1% of capacity inside (rather than 1e-6) took 926 iterations instead
    # of 960 over the three strategies and ended at as good or better local optima.
    "bound_push": 1e-2,
    "bound_frac": 1e-2,
    # Ipopt's default. T = 56, strategy 2 needs more than 1000 (docs/model.md).
    "max_iter": 3000,
    # The only linear solver in cyipopt-wheels. Its pivot tolerance, scaling and orderings
    # did not change the time per iteration.
    "linear_solver": "mumps",
}


#: The planner's options from a start near an optimum (the priced start of
#: :mod:`planner.solver.start_point`): the monotone barrier rule from a small barrier parameter, and
#: the start pushed only 1e-4 inside its bounds, so that Ipopt does not first leave the
#: neighbourhood of the start (measured: docs/model.md).
NEAR_START_OPTIONS: Mapping[str, Any] = {
    **PLANNER_OPTIONS,
    "mu_strategy": "monotone",
    "mu_init": 1e-6,
    "bound_push": 1e-4,
    "bound_frac": 1e-4,
    # Full steps in the constraint multipliers (not the primal step length): B = 255,
    # T = 14 took 37 / 88 / 88 iterations on strategies 1 / 2 / 3 instead of 33 / 100 / 82,
    # to the same objectives (docs/model.md).
    "alpha_for_y": "full",
}


@dataclass(frozen=True)
class IpoptOutcome:
    """What one Ipopt run returned.

    Attributes
    ----------
    status : SolveStatus
    ipopt_status : int
        Ipopt's ApplicationReturnStatus code.
    message : str
        Ipopt's message for that code.
    x : ndarray, shape (n,)
        The last iterate (the solution when ``status.ok``).
    objective : float
        Objective at ``x`` in the model's sense.
    constraint_multipliers : ndarray, shape (m,)
        Lagrange multipliers of the constraints (Ipopt's sign convention).
    iterations : int
    seconds : float
        Wall-clock time of the Ipopt call.
    """

    status: SolveStatus
    ipopt_status: int
    message: str
    x: np.ndarray
    objective: float
    constraint_multipliers: np.ndarray
    iterations: int
    seconds: float


class _Problem:
    """cyipopt's problem protocol over a CompiledNLP, counting iterations."""

    def __init__(self, nlp: CompiledNLP) -> None:
        self.nlp = nlp
        self.iterations = 0
        self.objective = nlp.objective
        self.gradient = nlp.gradient
        self.constraints = nlp.constraints
        self.jacobian = nlp.jacobian
        self.jacobianstructure = nlp.jacobianstructure
        self.hessian = nlp.hessian
        self.hessianstructure = nlp.hessianstructure

    def intermediate(self, alg_mod: int, iter_count: int, *_: Any) -> bool:
        self.iterations = iter_count
        return True


def solve_nlp(
    nlp: CompiledNLP,
    x0: np.ndarray | None = None,
    options: Mapping[str, Any] = PLANNER_OPTIONS,
    *,
    use_scaling: bool = True,
    print_level: int = 0,
) -> IpoptOutcome:
    """Solve ``nlp`` from ``x0`` [n] (default: the model's current values) with Ipopt.

    ``use_scaling`` passes the model's ``scaling_factor`` Suffix to Ipopt (it takes effect
    with ``nlp_scaling_method = user-scaling``).
    """
    problem_obj = _Problem(nlp)
    problem = cyipopt.Problem(
        n=nlp.n,
        m=nlp.m,
        problem_obj=problem_obj,
        lb=nlp.x_lower,
        ub=nlp.x_upper,
        cl=nlp.g_lower,
        cu=nlp.g_upper,
    )
    problem.add_option("print_level", print_level)
    problem.add_option("sb", "yes")
    for key, value in options.items():
        problem.add_option(key, value)
    scaling = nlp.scaling() if use_scaling else None
    if scaling is not None:
        problem.set_problem_scaling(*scaling)
    start = nlp.initial_point() if x0 is None else np.clip(x0, nlp.x_lower, nlp.x_upper)
    t0 = time.perf_counter()
    x, info = problem.solve(start)
    seconds = time.perf_counter() - t0
    code = int(info["status"])
    message = info["status_msg"]
    if isinstance(message, bytes):
        message = message.decode(errors="replace")
    return IpoptOutcome(
        status=IPOPT_STATUS.get(code, SolveStatus.ERROR),
        ipopt_status=code,
        message=str(message),
        x=np.asarray(x, dtype=float),
        objective=nlp.objective_value(np.asarray(x, dtype=float)),
        constraint_multipliers=np.asarray(info["mult_g"], dtype=float),
        iterations=problem_obj.iterations,
        seconds=seconds,
    )

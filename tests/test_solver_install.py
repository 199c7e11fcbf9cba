"""Ipopt really solves: cyipopt (from cyipopt-wheels) on Hock-Schittkowski problem 71.

HS071 with exact first and second derivatives; the known optimum is f* = 17.0140173 at
x* = (1, 4.7429994, 3.8211503, 1.3794082). A broken Ipopt install fails here, in CI.
"""

from __future__ import annotations

import numpy as np
import pytest

cyipopt = pytest.importorskip("cyipopt", reason="cyipopt must be installed (cyipopt-wheels)")


class HS071:
    """min x0 x3 (x0+x1+x2) + x2  s.t.  x0 x1 x2 x3 >= 25,  sum x^2 = 40,  1 <= x <= 5."""

    def objective(self, x: np.ndarray) -> float:
        return float(x[0] * x[3] * np.sum(x[0:3]) + x[2])

    def gradient(self, x: np.ndarray) -> np.ndarray:
        return np.array(
            [
                x[0] * x[3] + x[3] * np.sum(x[0:3]),
                x[0] * x[3],
                x[0] * x[3] + 1.0,
                x[0] * np.sum(x[0:3]),
            ]
        )

    def constraints(self, x: np.ndarray) -> np.ndarray:
        return np.array([np.prod(x), np.dot(x, x)])

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate((np.prod(x) / x, 2 * x))

    def hessianstructure(self) -> tuple[np.ndarray, np.ndarray]:
        return np.nonzero(np.tril(np.ones((4, 4))))

    def hessian(self, x: np.ndarray, lagrange: np.ndarray, obj_factor: float) -> np.ndarray:
        H = obj_factor * np.array(
            [
                [2 * x[3], 0, 0, 0],
                [x[3], 0, 0, 0],
                [x[3], 0, 0, 0],
                [2 * x[0] + x[1] + x[2], x[0], x[0], 0],
            ]
        )
        H += lagrange[0] * np.array(
            [
                [0, 0, 0, 0],
                [x[2] * x[3], 0, 0, 0],
                [x[1] * x[3], x[0] * x[3], 0, 0],
                [x[1] * x[2], x[0] * x[2], x[0] * x[1], 0],
            ]
        )
        H += lagrange[1] * 2 * np.eye(4)
        row, col = self.hessianstructure()
        return H[row, col]


def test_ipopt_solves_hs071_to_the_known_optimum() -> None:
    problem = cyipopt.Problem(
        n=4,
        m=2,
        problem_obj=HS071(),
        lb=[1.0] * 4,
        ub=[5.0] * 4,
        cl=[25.0, 40.0],
        cu=[2.0e19, 40.0],
    )
    problem.add_option("print_level", 0)
    problem.add_option("sb", "yes")
    problem.add_option("tol", 1e-9)
    x, info = problem.solve(np.array([1.0, 5.0, 5.0, 1.0]))
    assert info["status"] == 0, info["status_msg"]
    assert info["obj_val"] == pytest.approx(17.0140173, rel=1e-7)
    np.testing.assert_allclose(x, [1.0, 4.7429994, 3.8211503, 1.3794082], rtol=1e-6)


def test_pyomo_builds_a_model() -> None:
    pyo = pytest.importorskip("pyomo.environ")
    m = pyo.ConcreteModel()
    m.x = pyo.Var(bounds=(0, None), initialize=1.0)
    m.obj = pyo.Objective(expr=(m.x - 2) ** 2)
    assert pyo.value(m.obj) == pytest.approx(1.0)

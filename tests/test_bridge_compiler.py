"""The compiled bridge agrees with Pyomo's own evaluation and differentiation.

At random points of a small WebFountain instance (B = 4, T = 3, obsolete pages a variable at
t = 2 and 3 and an expression at t = 1, so named and nested expressions are covered) the
compiled objective,
constraint bodies, Jacobian and Hessian of the Lagrangian are checked against
``pyomo.environ.value`` and ``differentiate(..., mode=reverse_numeric)`` applied to the very
same model; the Hessian's columns against differentiating Pyomo's symbolic gradient of the
Lagrangian again.
"""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.core.expr.calculus.derivatives import Modes, differentiate

from planner.model.paper_instances import paper_instance
from planner.model.webfountain import build_model, set_data
from planner.model.weights import strategy_weights
from planner.solver.compiler import UnsupportedExpressionError, compile_model

SEED = 20240604


@pytest.fixture(scope="module")
def model_and_nlp() -> tuple[pyo.ConcreteModel, object]:
    instance = paper_instance(1, periods=3, buckets=4)
    weights = strategy_weights(3, 4, 3)
    # Non-uniform weights so that every objective term has its own coefficient.
    weights = type(weights)(
        weights.oldwt * np.linspace(0.5, 2.0, 12).reshape(4, 3), weights.newwt + 0.3, "test"
    )
    model = build_model(instance, weights, state_every=2)
    return model, compile_model(model)


def _random_point(nlp: object, rng: np.random.Generator) -> np.ndarray:
    x0 = nlp.initial_point()  # type: ignore[attr-defined]
    return np.asarray(x0 * rng.uniform(0.5, 1.5, size=x0.size) + rng.uniform(0, 10, x0.size))


def test_sizes_match_the_model(model_and_nlp: tuple[pyo.ConcreteModel, object]) -> None:
    model, nlp = model_and_nlp
    B, T, S = 4, 3, len(model.S)
    assert list(model.S) == [2, 3]
    assert nlp.n == B * T + B * S + 3 * T  # type: ignore[attr-defined]  # f, y_state, n z Z
    assert nlp.m == B * S + 4 * T  # type: ignore[attr-defined]
    # Inner sums are split into terms: the sum over buckets in n[t] = n[t-1] + ... is B
    # one-slot terms of one template, not one term with B slots.
    groups = nlp._objective_groups + nlp._constraint_groups  # type: ignore[attr-defined]
    assert max(g.var_index.shape[1] for g in groups) <= 5


@pytest.mark.parametrize("trial", range(3))
def test_values_and_derivatives_match_pyomo(
    model_and_nlp: tuple[pyo.ConcreteModel, object], trial: int
) -> None:
    _, nlp = model_and_nlp
    rng = np.random.default_rng(SEED + trial)
    x = _random_point(nlp, rng)
    lam = rng.normal(size=nlp.m)  # type: ignore[attr-defined]
    sigma = float(rng.uniform(0.5, 2.0))
    nlp.load_solution(x)  # type: ignore[attr-defined]
    variables = nlp.variables  # type: ignore[attr-defined]
    cons = nlp.constraint_data  # type: ignore[attr-defined]
    obj = nlp.objective_data  # type: ignore[attr-defined]

    assert nlp.objective(x) == pytest.approx(pyo.value(obj.expr), rel=1e-12)  # type: ignore[attr-defined]
    body = np.array([pyo.value(c.body) for c in cons])
    np.testing.assert_allclose(nlp.constraints(x), body, rtol=1e-12, atol=1e-6)  # type: ignore[attr-defined]

    grad = differentiate(obj.expr, wrt_list=variables, mode=Modes.reverse_numeric)
    np.testing.assert_allclose(nlp.gradient(x), grad, rtol=1e-12, atol=1e-12)  # type: ignore[attr-defined]

    jac = np.array(
        [differentiate(c.body, wrt_list=variables, mode=Modes.reverse_numeric) for c in cons]
    )
    np.testing.assert_allclose(nlp.dense_jacobian(x), jac, rtol=1e-10, atol=1e-12)  # type: ignore[attr-defined]

    # Hessian of the Lagrangian: differentiate Pyomo's symbolic gradient once more.
    lagrangian = sigma * obj.expr + sum(float(w) * c.body for w, c in zip(lam, cons, strict=True))
    first = differentiate(lagrangian, wrt_list=variables, mode=Modes.reverse_symbolic)
    hess = np.zeros((len(variables), len(variables)))
    for k, d1 in enumerate(first):
        if isinstance(d1, (int, float)):
            continue
        hess[k] = differentiate(d1, wrt_list=variables, mode=Modes.reverse_numeric)
    dense = nlp.dense_hessian(x, lam, sigma)  # type: ignore[attr-defined]
    np.testing.assert_allclose(dense, hess, rtol=1e-9, atol=1e-12)
    assert np.count_nonzero(hess) > 0


def test_parameters_are_read_again_after_a_what_if(
    model_and_nlp: tuple[pyo.ConcreteModel, object],
) -> None:
    model, nlp = model_and_nlp
    x = nlp.initial_point()  # type: ignore[attr-defined]
    instance = paper_instance(1, periods=3, buckets=4)
    changed = instance.replace(capacity=[1.0, 2.0, 3.0], nconst=123.0)
    weights = strategy_weights(1, 4, 3)
    try:
        set_data(model, changed, weights)
        nlp.refresh_parameters()  # type: ignore[attr-defined]
        nlp.load_solution(x)  # type: ignore[attr-defined]
        assert nlp.objective(x) == pytest.approx(pyo.value(model.obsolete_weighted), rel=1e-12)  # type: ignore[attr-defined]
        g = nlp.constraints(x)  # type: ignore[attr-defined]
        body = np.array([pyo.value(c.body) for c in nlp.constraint_data])  # type: ignore[attr-defined]
        np.testing.assert_allclose(g, body, rtol=1e-12, atol=1e-6)
        rows = [
            k for k, c in enumerate(nlp.constraint_data) if c.parent_component() is model.crawl_time
        ]  # type: ignore[attr-defined]
        np.testing.assert_allclose(nlp.g_upper[rows], [1.0, 2.0, 3.0])  # type: ignore[attr-defined]
    finally:
        set_data(model, instance, strategy_weights(3, 4, 3))
        nlp.refresh_parameters()  # type: ignore[attr-defined]


def test_a_generic_model_with_functions_and_a_maximization() -> None:
    m = pyo.ConcreteModel()
    m.x = pyo.Var([1, 2, 3], initialize=0.7)
    m.k = pyo.Param(mutable=True, initialize=2.5)
    m.fixed = pyo.Var(initialize=1.5)
    m.fixed.fix()
    m.e = pyo.Expression(expr=m.x[1] * m.x[2])
    m.obj = pyo.Objective(
        expr=pyo.exp(m.x[1]) - m.k * m.x[2] ** 3 + pyo.log(m.x[3]) * m.fixed + m.e,
        sense=pyo.maximize,
    )
    m.c1 = pyo.Constraint(expr=pyo.sqrt(m.x[1] + m.x[3]) / m.x[2] <= m.k)
    m.c2 = pyo.Constraint(expr=(0, m.x[1] ** 2 + pyo.sin(m.x[2]), 4))
    nlp = compile_model(m)
    assert nlp.n == 3 and nlp.m == 2
    x = np.array([0.3, 1.2, 2.0])
    nlp.load_solution(x)
    assert nlp.objective(x) == pytest.approx(-pyo.value(m.obj), rel=1e-12)
    np.testing.assert_allclose(nlp.constraints(x), [pyo.value(m.c1.body), pyo.value(m.c2.body)])
    grad = differentiate(m.obj.expr, wrt_list=nlp.variables, mode=Modes.reverse_numeric)
    np.testing.assert_allclose(nlp.gradient(x), -np.asarray(grad), rtol=1e-12)
    assert nlp.g_lower[1] == 0 and nlp.g_upper[1] == 4
    m.fixed.fix(3.0)
    nlp.refresh_parameters()
    assert nlp.objective(x) == pytest.approx(-pyo.value(m.obj), rel=1e-12)


def test_unsupported_nodes_are_named() -> None:
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=1.0)
    m.obj = pyo.Objective(expr=pyo.Expr_if(m.x >= 0, m.x, -m.x))
    with pytest.raises(UnsupportedExpressionError, match="cannot compile"):
        compile_model(m)

"""Compile a Pyomo model's own expressions into vectorized NLP callbacks with exact derivatives.

The bridge from Pyomo to Ipopt (through cyipopt) needs, at every iteration, the objective
``f(v)``, its gradient, the constraint bodies ``g(v)``, their Jacobian and the Hessian of the
Lagrangian ``sigma * grad^2 f + sum_r lambda_r grad^2 g_r``. Pyomo's generic differentiation
walks every expression tree on every call (about 0.34 s per Jacobian at B = 255, T = 14), so this
module compiles once and evaluates in vectorized numpy afterwards:

1. Every active constraint body and the active objective is split into its sum terms, nested
   sums flattened (through negations and constant factors: ``n - (n0 + sum_i w_i x_i)`` gives
   ``n, -n0, -w_1 x_1, ...``). Each term is printed as a *template*: its code with the
   variables replaced by slots ``v[0], v[1], ...`` and the mutable parameters (and fixed
   variables) by slots ``p[0], p[1], ...``, in order of first appearance; numeric constants
   stay literal.
2. Terms with the same template form a *group* (an indexed constraint family written by one
   rule gives a handful of groups however many indices it has). A group stores, per term, the
   output row and the global indices of its variable and parameter slots.
3. For one representative term per group, Pyomo's own symbolic differentiation
   (:func:`pyomo.core.expr.calculus.derivatives.differentiate`, ``reverse_symbolic``) gives the
   first derivatives with respect to each variable slot, and differentiating those again gives
   the second derivatives. They are printed with the same slot map and compiled into numpy
   functions of the slot columns, so one call evaluates the whole group.
4. Jacobian and Hessian entries from all groups are scattered into fixed sparsity patterns
   (duplicates summed with :func:`numpy.bincount`), as Ipopt requires.

Nothing here knows the WebFountain equations: the model module is the only copy of them.
Parameters are read again by :meth:`CompiledNLP.refresh_parameters`, so a what-if run that
changes mutable Params reuses the compiled callbacks; changing the model's *structure* (adding
or deactivating constraints, fixing or unfixing variables) needs a new compilation.

Scaling factors come from the Pyomo convention, a ``scaling_factor`` Suffix on the model
(variables, constraints and the objective), and are handed to Ipopt's user scaling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyomo.core.expr.numeric_expr as nx
import pyomo.environ as pyo
from pyomo.core.base.expression import ExpressionData, ScalarExpression
from pyomo.core.expr.calculus.derivatives import Modes, differentiate

__all__ = ["CompiledNLP", "UnsupportedExpressionError", "compile_model"]

#: Infinite bounds are passed to Ipopt as +-2e19 (its ``nlp_lower/upper_bound_inf``).
IPOPT_INFINITY = 2.0e19

_FUNCTIONS = {"exp", "log", "log10", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh"}
_FUNCTIONS |= {"asin", "acos", "atan", "asinh", "acosh", "atanh"}
_NUMPY_NAME = {"asin": "arcsin", "acos": "arccos", "atan": "arctan"}
_NUMPY_NAME |= {"asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh"}

_Kernel = Callable[[np.ndarray, np.ndarray], Any]


class UnsupportedExpressionError(TypeError):
    """A Pyomo expression node the compiler cannot translate (external functions, if-then)."""


class _Printer:
    """Print Pyomo expressions as numpy code over variable and parameter slots.

    ``var_slots`` and ``param_slots`` map ``id(component)`` to a slot number; new leaves get
    the next slot, recorded in ``variables`` and ``parameters`` in slot order.
    """

    def __init__(self) -> None:
        self.var_slots: dict[int, int] = {}
        self.param_slots: dict[int, int] = {}
        self.variables: list[Any] = []
        self.parameters: list[Any] = []

    def code(self, node: Any) -> str:
        """Return numpy code for ``node`` (an expression, a component data or a number)."""
        if isinstance(node, (int, float)):
            return repr(float(node))
        if not hasattr(node, "is_expression_type"):
            raise UnsupportedExpressionError(f"cannot compile {type(node).__name__}: {node!r}")
        if node.is_expression_type():
            return self._expression(node)
        if node.is_variable_type():
            if node.fixed:
                return f"p[{self._slot(node, self.param_slots, self.parameters)}]"
            return f"v[{self._slot(node, self.var_slots, self.variables)}]"
        if node.is_constant():
            return repr(float(pyo.value(node)))
        if node.is_parameter_type():  # a mutable Param: read again by refresh_parameters()
            return f"p[{self._slot(node, self.param_slots, self.parameters)}]"
        raise UnsupportedExpressionError(f"cannot compile {type(node).__name__}: {node}")

    @staticmethod
    def _slot(node: Any, slots: dict[int, int], leaves: list[Any]) -> int:
        key = id(node)
        slot = slots.get(key)
        if slot is None:
            slot = slots[key] = len(leaves)
            leaves.append(node)
        return slot

    def _expression(self, node: Any) -> str:
        if isinstance(node, (ExpressionData, ScalarExpression)):
            return self.code(node.expr)
        args = [self.code(a) for a in node.args]
        if isinstance(node, nx.SumExpression):
            return "(" + " + ".join(args) + ")" if args else "0.0"
        if isinstance(node, nx.ProductExpression):
            return f"({args[0]} * {args[1]})"
        if isinstance(node, nx.DivisionExpression):
            return f"({args[0]} / {args[1]})"
        if isinstance(node, nx.PowExpression):
            return f"({args[0]} ** {args[1]})"
        if isinstance(node, nx.NegationExpression):
            return f"(-{args[0]})"
        if isinstance(node, nx.AbsExpression):
            return f"np.abs({args[0]})"
        if isinstance(node, nx.UnaryFunctionExpression):
            name = node.getname()
            if name not in _FUNCTIONS:
                raise UnsupportedExpressionError(f"cannot compile function {name!r}")
            return f"np.{_NUMPY_NAME.get(name, name)}({args[0]})"
        raise UnsupportedExpressionError(f"cannot compile {type(node).__name__}: {node}")


def _terms(expr: Any) -> list[Any]:
    """The sum terms of ``expr``, flattened: sums nested in sums, in a negation or scaled by a
    constant factor are split too (``n - (a + b)`` gives ``n, -a, -b``), so that a long inner
    sum becomes many small terms of one template instead of one term with many slots. Named
    expressions are looked through."""
    while isinstance(expr, (ExpressionData, ScalarExpression)):
        expr = expr.expr
    if not (hasattr(expr, "is_potentially_variable") and expr.is_potentially_variable()):
        return [expr]
    if isinstance(expr, nx.SumExpression):
        return [term for arg in expr.args for term in _terms(arg)]
    if isinstance(expr, nx.NegationExpression):
        return [_negated(term) for term in _terms(expr.args[0])]
    if isinstance(expr, nx.ProductExpression) and not isinstance(expr, nx.DivisionExpression):
        factor, inner = expr.args
        if _is_constant_factor(factor) and _is_named_or_sum(inner):
            return [factor * term for term in _terms(inner)]
        if _is_constant_factor(inner) and _is_named_or_sum(factor):
            return [term * inner for term in _terms(factor)]
    return [expr]


def _negated(term: Any) -> Any:
    return -term


def _is_constant_factor(node: Any) -> bool:
    """A number or an expression of parameters only (no variable can appear in it)."""
    return not (hasattr(node, "is_potentially_variable") and node.is_potentially_variable())


def _is_named_or_sum(node: Any) -> bool:
    while isinstance(node, (ExpressionData, ScalarExpression)):
        node = node.expr
    return isinstance(node, (nx.SumExpression, nx.NegationExpression))


def _compile(code: str) -> _Kernel:
    kernel: _Kernel = eval(compile(f"lambda v, p: {code}", "<nlp_compiler>", "eval"), {"np": np})
    return kernel


def _is_zero(expr: Any) -> bool:
    return isinstance(expr, (int, float)) and expr == 0


@dataclass
class _Group:
    """Terms sharing one template: value, gradient and Hessian kernels over slot columns."""

    rows: np.ndarray  # [k] output row of each term (-1 for the objective)
    var_index: np.ndarray  # [k, nv] global variable index per slot
    param_index: np.ndarray  # [k, np] global parameter index per slot
    value: _Kernel
    grad: list[tuple[int, _Kernel]]  # (slot, kernel) with a nonzero derivative
    hess: list[tuple[int, int, _Kernel]]  # (slot_i >= slot_j, kernel) nonzero second derivative


class _TemplateBuilder:
    """Collect terms by template and give every leaf a global index."""

    def __init__(
        self, variables: dict[int, int], parameters: dict[int, int], var_objects: list[Any]
    ) -> None:
        self.var_index = variables
        self.var_objects = var_objects
        self.param_index = parameters
        self.param_objects: list[Any] = []
        self.templates: dict[str, tuple[Any, _Printer, list[int], list[list[int]], list[list[int]]]]
        self.templates = {}

    def add(self, term: Any, row: int) -> None:
        printer = _Printer()
        code = printer.code(term)
        vidx = []
        for v in printer.variables:
            key = id(v)
            if key not in self.var_index:
                self.var_index[key] = len(self.var_objects)
                self.var_objects.append(v)
            vidx.append(self.var_index[key])
        pidx = []
        for p in printer.parameters:
            key = id(p)
            if key not in self.param_index:
                self.param_index[key] = len(self.param_objects)
                self.param_objects.append(p)
            pidx.append(self.param_index[key])
        template = ("objective: " if row < 0 else "constraint: ") + code
        entry = self.templates.get(template)
        if entry is None:
            self.templates[template] = (term, printer, [row], [vidx], [pidx])
        else:
            entry[2].append(row)
            entry[3].append(vidx)
            entry[4].append(pidx)

    def groups(self) -> list[_Group]:
        out = []
        for key, (term, printer, rows, vidx, pidx) in self.templates.items():
            code = key.split(": ", 1)[1]
            slots = printer.variables
            grad: list[tuple[int, _Kernel]] = []
            hess: list[tuple[int, int, _Kernel]] = []
            if slots:
                first = differentiate(term, wrt_list=slots, mode=Modes.reverse_symbolic)
                for i, d1 in enumerate(first):
                    if _is_zero(d1):
                        continue
                    grad.append((i, _compile(printer.code(d1))))
                    if isinstance(d1, (int, float)) or not d1.is_potentially_variable():
                        continue
                    second = differentiate(d1, wrt_list=slots[: i + 1], mode=Modes.reverse_symbolic)
                    for j, d2 in enumerate(second):
                        if not _is_zero(d2):
                            hess.append((i, j, _compile(printer.code(d2))))
            if len(printer.variables) != len(slots):  # pragma: no cover - derivative leaves
                raise UnsupportedExpressionError(f"derivative of {code} introduced new leaves")
            out.append(
                _Group(
                    rows=np.asarray(rows, dtype=np.int64),
                    var_index=np.asarray(vidx, dtype=np.int64).reshape(len(rows), len(slots)),
                    param_index=np.asarray(pidx, dtype=np.int64).reshape(len(rows), -1),
                    value=_compile(code),
                    grad=grad,
                    hess=hess,
                )
            )
        return out


class _Scatter:
    """A fixed sparsity pattern: entries (row, col) from many sources summed into nnz values."""

    def __init__(self, rows: np.ndarray, cols: np.ndarray, ncols: int) -> None:
        keys = rows.astype(np.int64) * max(ncols, 1) + cols.astype(np.int64)
        unique, self.inverse = np.unique(keys, return_inverse=True)
        self.rows = (unique // max(ncols, 1)).astype(np.int64)
        self.cols = (unique % max(ncols, 1)).astype(np.int64)
        self.nnz = int(unique.size)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.inverse, weights=values, minlength=self.nnz)


class CompiledNLP:
    """A Pyomo model's active objective and constraints as vectorized callbacks.

    Build with :func:`compile_model`. ``n`` variables (the unfixed variables that appear in an
    active constraint or the objective, in :attr:`variables` order) and ``m`` constraints
    ``g_lower <= g(v) <= g_upper`` (the active scalar constraints, in :attr:`constraints`
    order). The methods have the signatures cyipopt expects of a problem object.
    """

    def __init__(self, model: pyo.ConcreteModel) -> None:
        self._model = model
        objectives = list(model.component_data_objects(pyo.Objective, active=True))
        if len(objectives) != 1:
            raise ValueError(f"the model needs one active objective, it has {len(objectives)}")
        self.objective_data = objectives[0]
        self.sense = 1.0 if self.objective_data.sense == pyo.minimize else -1.0
        self.constraint_data: list[Any] = list(
            model.component_data_objects(pyo.Constraint, active=True, descend_into=True)
        )
        # Variables are numbered in order of first appearance in the terms (objective first);
        # the printer meets every unfixed variable of every term.
        self.variables: list[Any] = []
        builder = _TemplateBuilder({}, {}, self.variables)
        for term in _terms(self.objective_data.expr):
            builder.add(term, -1)
        for row, con in enumerate(self.constraint_data):
            for term in _terms(con.body):
                builder.add(term, row)
        self.n = len(self.variables)
        self.m = len(self.constraint_data)
        self._params = builder.param_objects
        groups = builder.groups()
        self._objective_groups = [g for g in groups if g.rows[0] < 0]
        self._constraint_groups = [g for g in groups if g.rows[0] >= 0]
        self._build_patterns()
        self.refresh_parameters()

    # -- structure ---------------------------------------------------------------------------

    def _build_patterns(self) -> None:
        jr, jc, hr, hc = [], [], [], []
        for g in self._constraint_groups:
            for slot, _ in g.grad:
                jr.append(g.rows)
                jc.append(g.var_index[:, slot])
        for g in self._objective_groups + self._constraint_groups:
            for i, j, _ in g.hess:
                a, b = g.var_index[:, i], g.var_index[:, j]
                hr.append(np.maximum(a, b))
                hc.append(np.minimum(a, b))
        empty = np.zeros(0, dtype=np.int64)
        self._jac = _Scatter(
            np.concatenate(jr) if jr else empty, np.concatenate(jc) if jc else empty, self.n
        )
        self._hess = _Scatter(
            np.concatenate(hr) if hr else empty, np.concatenate(hc) if hc else empty, self.n
        )

    def refresh_parameters(self) -> None:
        """Read the current values of mutable Params, fixed variables and bounds from the model."""
        self._p = np.array([pyo.value(p) for p in self._params], dtype=float)
        lb, ub = [], []
        for v in self.variables:
            lb.append(-IPOPT_INFINITY if v.lb is None else float(v.lb))
            ub.append(IPOPT_INFINITY if v.ub is None else float(v.ub))
        self.x_lower = np.array(lb)
        self.x_upper = np.array(ub)
        cl, cu = [], []
        for con in self.constraint_data:
            lo, up = con.lower, con.upper
            cl.append(-IPOPT_INFINITY if lo is None else float(pyo.value(lo)))
            cu.append(IPOPT_INFINITY if up is None else float(pyo.value(up)))
        self.g_lower = np.array(cl)
        self.g_upper = np.array(cu)

    def initial_point(self) -> np.ndarray:
        """The variables' current values in the model (0 when unset), clipped to their bounds."""
        x = np.array([0.0 if v.value is None else float(v.value) for v in self.variables])
        return np.clip(x, self.x_lower, self.x_upper)

    def load_solution(self, x: np.ndarray) -> None:
        """Write ``x`` [n] into the model's variables."""
        for v, val in zip(self.variables, x, strict=True):
            v.set_value(float(val), skip_validation=True)

    def scaling(self) -> tuple[float, np.ndarray, np.ndarray] | None:
        """Objective, variable [n] and constraint [m] factors from a ``scaling_factor`` Suffix."""
        suffix = getattr(self._model, "scaling_factor", None)
        if not isinstance(suffix, pyo.Suffix):
            return None

        def factor(c: Any) -> float:
            value = suffix.get(c)
            if value is None:
                parent = c.parent_component()
                value = suffix.get(parent, 1.0)
            return float(value)

        return (
            factor(self.objective_data),
            np.array([factor(v) for v in self.variables]),
            np.array([factor(c) for c in self.constraint_data]),
        )

    # -- evaluation (cyipopt problem protocol) ----------------------------------------------

    def _slots(self, g: _Group, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x[g.var_index.T], self._p[g.param_index.T]

    @staticmethod
    def _column(value: Any, k: int) -> np.ndarray:
        return np.broadcast_to(np.asarray(value, dtype=float), (k,))

    def objective_value(self, x: np.ndarray) -> float:
        """Objective value at ``x`` [n] (in the model's sense)."""
        total = 0.0
        for g in self._objective_groups:
            v, p = self._slots(g, x)
            total += float(np.sum(self._column(g.value(v, p), g.rows.size)))
        return total

    def objective(self, x: np.ndarray) -> float:
        """Objective to *minimize* at ``x`` [n] (negated for a maximization model)."""
        return self.sense * self.objective_value(x)

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """Gradient [n] of :meth:`objective`."""
        out = np.zeros(self.n)
        for g in self._objective_groups:
            v, p = self._slots(g, x)
            for slot, kernel in g.grad:
                np.add.at(out, g.var_index[:, slot], self._column(kernel(v, p), g.rows.size))
        return self.sense * out

    def constraints_body(self, x: np.ndarray) -> np.ndarray:
        """Constraint bodies g(x) [m]."""
        out = np.zeros(self.m)
        for g in self._constraint_groups:
            v, p = self._slots(g, x)
            out += np.bincount(
                g.rows, weights=self._column(g.value(v, p), g.rows.size), minlength=self.m
            )
        return out

    def constraints(self, x: np.ndarray) -> np.ndarray:
        """Constraint bodies g(x) [m] (cyipopt's name)."""
        return self.constraints_body(x)

    def jacobianstructure(self) -> tuple[np.ndarray, np.ndarray]:
        """Row and column indices [nnz] of the Jacobian's structural nonzeros."""
        return self._jac.rows, self._jac.cols

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """Jacobian values [nnz] in :meth:`jacobianstructure` order."""
        parts: list[np.ndarray] = []
        for g in self._constraint_groups:
            v, p = self._slots(g, x)
            parts.extend(self._column(k(v, p), g.rows.size) for _, k in g.grad)
        return self._jac.sum(np.concatenate(parts) if parts else np.zeros(0))

    def hessianstructure(self) -> tuple[np.ndarray, np.ndarray]:
        """Row and column indices [nnz] of the Lagrangian Hessian's lower triangle."""
        return self._hess.rows, self._hess.cols

    def hessian(self, x: np.ndarray, lagrange: np.ndarray, obj_factor: float) -> np.ndarray:
        """Lower-triangle values [nnz] of ``obj_factor * H_f + sum_r lagrange[r] * H_g[r]``."""
        parts: list[np.ndarray] = []
        for g in self._objective_groups:
            v, p = self._slots(g, x)
            w = obj_factor * self.sense
            parts.extend(w * self._column(k(v, p), g.rows.size) for _, _, k in g.hess)
        for g in self._constraint_groups:
            v, p = self._slots(g, x)
            lam = lagrange[g.rows]
            parts.extend(lam * self._column(k(v, p), g.rows.size) for _, _, k in g.hess)
        return self._hess.sum(np.concatenate(parts) if parts else np.zeros(0))

    def dense_jacobian(self, x: np.ndarray) -> np.ndarray:
        """The Jacobian as a dense [m, n] array (for tests and small models)."""
        out = np.zeros((self.m, self.n))
        out[self._jac.rows, self._jac.cols] = self.jacobian(x)
        return out

    def dense_hessian(self, x: np.ndarray, lagrange: np.ndarray, obj_factor: float) -> np.ndarray:
        """The full symmetric Lagrangian Hessian as a dense [n, n] array."""
        out = np.zeros((self.n, self.n))
        out[self._hess.rows, self._hess.cols] = self.hessian(x, lagrange, obj_factor)
        return out + np.tril(out, -1).T


def compile_model(model: pyo.ConcreteModel) -> CompiledNLP:
    """Compile ``model``'s active objective and constraints; see the module docstring."""
    return CompiledNLP(model)

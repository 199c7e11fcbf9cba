"""Reference PageRank by off-line power iteration (scipy.sparse), to check OPIC against.

The same semantics as :mod:`estimators.opic`'s virtual page: a walker on page ``i`` follows one
of its ``k`` outlinks with probability ``d / k`` each and otherwise (probability ``1 - d``,
or 1 from a dangling page) jumps to page ``j`` with probability ``w[j]`` (uniform by default).
Each iteration is::

    flow = P^T x            (P[i, j] = 1 / k_i for every link i -> j)
    x'   = d * flow + (1 - d * sum(flow)) * w

which keeps ``sum(x) = 1``; it stops when ``||x' - x||_1 <= tol``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from estimators.opic import DEFAULT_DAMPING, interest_weights
from estimators.opic_graph import LinkGraph

__all__ = ["PageRankResult", "link_matrix", "pagerank"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class PageRankResult:
    """The fixpoint and how the iteration got there.

    Attributes
    ----------
    scores : ndarray of float, shape (n_pages,)
        PageRank, summing to 1.
    iterations : int
        Matrix-vector products made.
    residual : float
        ``||x' - x||_1`` at the last iteration.
    converged : bool
        ``residual <= tol``.
    """

    scores: FloatArray
    iterations: int
    residual: float
    converged: bool


def link_matrix(graph: LinkGraph) -> sp.csr_matrix:
    """``P^T`` as CSR, shape (n_pages, n_pages): ``P^T[j, i] = 1 / k_i`` per link i -> j."""
    n = graph.n_pages
    degree = graph.out_degree
    data = np.repeat(1.0 / np.maximum(degree, 1), degree)
    forward = sp.csr_matrix((data, graph.indices, graph.indptr), shape=(n, n))
    return forward.T.tocsr()


def pagerank(
    graph: LinkGraph,
    *,
    damping: float = DEFAULT_DAMPING,
    interest: FloatArray | None = None,
    tol: float = 1e-12,
    max_iter: int = 1000,
    start: FloatArray | None = None,
) -> PageRankResult:
    """PageRank of every page by power iteration.

    Parameters
    ----------
    graph : LinkGraph
        The links.
    damping : float
        ``d`` in [0, 1].
    interest : ndarray of float, shape (n_pages,), optional
        Teleport (and dangling) weights, as OPIC's ``interest``; default uniform.
    tol : float
        Stop when the L1 change of an iteration is at most ``tol``.
    max_iter : int
        At most this many iterations (``converged`` says whether ``tol`` was met).
    start : ndarray of float, shape (n_pages,), optional
        Initial vector (default uniform); normalized to sum 1.
    """
    if not 0.0 <= damping <= 1.0:
        raise ValueError(f"damping must be in [0, 1], got {damping}")
    n = graph.n_pages
    weights = np.full(n, 1.0 / n) if interest is None else interest_weights(interest, n_pages=n)
    transition = link_matrix(graph)
    x = (
        np.full(n, 1.0 / n)
        if start is None
        else np.asarray(start, dtype=np.float64) / np.sum(start)
    )
    residual = np.inf
    iterations = 0
    while iterations < max_iter:
        flow = transition @ x
        nxt = damping * flow + (1.0 - damping * flow.sum()) * weights
        residual = float(np.abs(nxt - x).sum())
        x = nxt
        iterations += 1
        if residual <= tol:
            break
    return PageRankResult(x / x.sum(), iterations, residual, residual <= tol)

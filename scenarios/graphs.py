"""Synthetic link graphs for OPIC: seeded power-law graphs and a graph that keeps changing.

:func:`power_law_graph` draws about ``n_links`` edges: each page's out-degree and in-degree are
Poisson around Pareto weights (exponents ``out_exponent``, about 2.7 on the web, and
``in_exponent``, about 2.1), and out-stubs are paired with a random permutation of the in-stubs
(the configuration model), so in- and out-degrees both follow power laws.
Duplicates and self-loops are dropped by :meth:`~estimators.opic_graph.LinkGraph.from_edges`.
Everything is vectorized: a 1,000,000-page, 10,000,000-link graph builds in a few seconds.

:func:`change_in_degrees` is the OPIC paper's changing web (sec. 4.2): a share of the pages
have their in-degree "significantly modified", half of them doubled (new links from random
pages) and half halved (half of their inlinks removed).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from estimators.opic_graph import LinkGraph

__all__ = ["change_in_degrees", "pareto_weights", "power_law_graph"]

FloatArray = NDArray[np.float64]


def pareto_weights(n: int, exponent: float, rng: np.random.Generator) -> FloatArray:
    """``n`` Pareto weights >= 1 with density ~ ``x ** -exponent`` (exponent > 1)."""
    if not exponent > 1:
        raise ValueError(f"a power-law exponent must be > 1, got {exponent}")
    return np.asarray((1.0 - rng.random(n)) ** (-1.0 / (exponent - 1.0)), dtype=np.float64)


def power_law_graph(
    n_pages: int,
    n_links: int,
    *,
    in_exponent: float = 2.1,
    out_exponent: float = 2.7,
    seed: int = 0,
) -> LinkGraph:
    """A seeded random graph with power-law in- and out-degrees.

    Parameters
    ----------
    n_pages : int
        Pages, >= 1.
    n_links : int
        Edges drawn (before duplicates and self-loops are dropped), >= 0.
    in_exponent, out_exponent : float
        Exponents of the in- and out-degree tails.
    seed : int
        Seed of the random stream: the same arguments give the same graph.
    """
    if n_pages < 1 or n_links < 0:
        raise ValueError(f"need n_pages >= 1 and n_links >= 0, got {n_pages}, {n_links}")
    rng = np.random.default_rng(seed)
    out_weight = pareto_weights(n_pages, out_exponent, rng)
    out_degree = rng.poisson(out_weight * (n_links / out_weight.sum()))
    attract = pareto_weights(n_pages, in_exponent, rng)
    in_degree = rng.poisson(attract * (n_links / attract.sum()))
    # The configuration model: pair the out-stubs with a random permutation of the in-stubs.
    pages = np.arange(n_pages, dtype=np.int64)
    src = np.repeat(pages, out_degree)
    dst = rng.permutation(np.repeat(pages, in_degree))
    size = min(src.size, dst.size)
    src, dst = src[:size], dst[:size]
    # Shuffle the page ids so that page number says nothing about degree.
    relabel = rng.permutation(n_pages).astype(np.int64)
    return LinkGraph.from_edges(relabel[src], relabel[dst], n_pages)


def change_in_degrees(
    graph: LinkGraph, share: float, rng: np.random.Generator
) -> tuple[LinkGraph, NDArray[np.int64]]:
    """The graph after ``share`` of its pages had their in-degree doubled or halved.

    Parameters
    ----------
    graph : LinkGraph
        The current graph.
    share : float
        Share in [0, 1] of the pages changed: half (at random) doubled, half halved.
    rng : numpy.random.Generator
        The random stream.

    Returns
    -------
    graph : LinkGraph
        The new graph, same pages.
    changed : ndarray of int, shape (round(share * n_pages),)
        The pages changed.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    n = graph.n_pages
    changed = rng.choice(n, size=round(share * n), replace=False).astype(np.int64)
    doubled = np.zeros(n, dtype=bool)
    halved = np.zeros(n, dtype=bool)
    up = rng.random(changed.size) < 0.5
    doubled[changed[up]] = True
    halved[changed[~up]] = True
    src, dst = graph.sources, graph.indices
    keep = ~(halved[dst] & (rng.random(dst.size) < 0.5))
    in_degree = np.bincount(dst, minlength=n)
    grown = np.flatnonzero(doubled)
    extra = np.maximum(in_degree[grown], 1)
    new_dst = np.repeat(grown, extra)
    new_src = rng.integers(0, n, size=new_dst.size)
    return (
        LinkGraph.from_edges(np.r_[src[keep], new_src], np.r_[dst[keep], new_dst], n),
        changed,
    )

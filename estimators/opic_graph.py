"""The link graph OPIC and PageRank read, in compressed sparse row (CSR) form.

Pages are the integers ``0 .. n_pages - 1``. Page ``i``'s outlinks are
``indices[indptr[i]:indptr[i + 1]]``, sorted and distinct. What :meth:`LinkGraph.from_edges`
does with edges a crawler really sees:

* **Duplicate edges** (a page linking twice to the same page) count once: a link is a vote,
  and a page cannot vote twice by repeating an anchor. The count dropped is kept in
  ``duplicates_dropped``.
* **Self-loops** are dropped (``self_loops_dropped``): a page's cash cannot flow back to
  itself, or a page would vote for itself (PageRank implementations drop them too).
* **Dangling pages** (no outlink left) are allowed: their cash goes to the virtual page (see
  :mod:`estimators.opic`), which is PageRank's "dangling mass spread by the teleport vector".
* **An empty graph** (no page) raises :class:`EmptyGraphError`; ids outside ``[0, n_pages)``
  raise :class:`UnknownPageError`; mismatched or non-integer arrays raise :class:`GraphError`.
  All are ``ValueError`` subclasses whose message says what to fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["EmptyGraphError", "GraphError", "LinkGraph", "UnknownPageError"]

IntArray = NDArray[np.int64]


class GraphError(ValueError):
    """A link graph that cannot be built from the edges given; the message says why."""


class EmptyGraphError(GraphError):
    """A graph without any page: there is no importance to compute."""


class UnknownPageError(GraphError):
    """An edge names a page id outside ``[0, n_pages)``."""


def _as_ids(values: ArrayLike, name: str) -> IntArray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise GraphError(f"{name} must be a 1-d array of page ids, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array % 1 == 0):
            return array.astype(np.int64)
        raise GraphError(f"{name} must hold integer page ids, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


@dataclass(frozen=True, eq=False)
class LinkGraph:
    """A directed link graph in CSR form (build it with :meth:`from_edges`).

    Attributes
    ----------
    indptr : ndarray of int64, shape (n_pages + 1,)
        Row pointers: page ``i``'s outlinks are ``indices[indptr[i]:indptr[i + 1]]``.
    indices : ndarray of int64, shape (n_links,)
        Link targets, sorted and distinct within a row, no self-loop.
    self_loops_dropped, duplicates_dropped : int
        Edges :meth:`from_edges` dropped, for the caller to report.
    """

    indptr: IntArray
    indices: IntArray
    self_loops_dropped: int = 0
    duplicates_dropped: int = 0

    @property
    def n_pages(self) -> int:
        """Number of pages n."""
        return int(self.indptr.size - 1)

    @property
    def n_links(self) -> int:
        """Number of distinct links kept."""
        return int(self.indices.size)

    @property
    def out_degree(self) -> IntArray:
        """Outlinks per page, shape (n_pages,); 0 marks a dangling page."""
        return np.diff(self.indptr)

    @property
    def sources(self) -> IntArray:
        """Source page of every link, shape (n_links,), aligned with ``indices``."""
        return np.repeat(np.arange(self.n_pages, dtype=np.int64), self.out_degree)

    @classmethod
    def from_edges(cls, src: ArrayLike, dst: ArrayLike, n_pages: int | None = None) -> LinkGraph:
        """Build the graph from parallel arrays of edges ``src[e] -> dst[e]``.

        Parameters
        ----------
        src, dst : array-like of int, shape (n_edges,)
            Page ids in ``[0, n_pages)``.
        n_pages : int, optional
            Number of pages; pages without any edge are allowed (dangling, never linked).
            Default: ``max(src, dst) + 1``.

        Raises
        ------
        EmptyGraphError
            No page at all (``n_pages == 0``, or no edge and no ``n_pages``).
        UnknownPageError
            An id is negative or ``>= n_pages``.
        GraphError
            ``src`` and ``dst`` differ in length or hold non-integer ids.
        """
        s = _as_ids(src, "src")
        d = _as_ids(dst, "dst")
        if s.size != d.size:
            raise GraphError(f"src and dst differ in length ({s.size} != {d.size})")
        if n_pages is None:
            if s.size == 0:
                raise EmptyGraphError("the graph has no edge and no page: give at least one edge")
            n_pages = int(max(s.max(), d.max())) + 1
        if n_pages <= 0:
            raise EmptyGraphError(f"the graph has no page (n_pages = {n_pages})")
        for name, ids in (("src", s), ("dst", d)):
            if ids.size and (ids.min() < 0 or ids.max() >= n_pages):
                bad = ids[(ids < 0) | (ids >= n_pages)]
                raise UnknownPageError(
                    f"{bad.size} edge(s) have a {name} outside the pages 0..{n_pages - 1} "
                    f"(first: {int(bad[0])}); list every page or fix the edges"
                )
        loops = s == d
        n_loops = int(np.count_nonzero(loops))
        if n_loops:
            s, d = s[~loops], d[~loops]
        # One sort orders the edges row by row and brings duplicates together.
        key = np.sort(s * np.int64(n_pages) + d)
        if key.size:
            key = key[np.r_[True, key[1:] != key[:-1]]]
        duplicates = int(s.size - key.size)
        rows = key // n_pages
        indices = key - rows * n_pages
        indptr = np.zeros(n_pages + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n_pages), out=indptr[1:])
        return cls(indptr, indices, n_loops, duplicates)

    def outlinks(self, page: int) -> IntArray:
        """Outlinks of one page, shape (out_degree[page],)."""
        return self.indices[self.indptr[page] : self.indptr[page + 1]]

"""OPIC: on-line page importance from cash and history (Abiteboul, Preda, Cobena 2003).

Every page ``i`` holds cash ``C[i]`` and a credit history ``H[i]``; one *virtual page* ``v``
(index ``n``) links to every page and receives the cash no link carries. Crawling page ``i``
with ``k`` outlinks::

    H[i] += C[i];  G += C[i]
    each outlink j:  C[j] += d * C[i] / k        (d: damping; a dangling page sends all to v)
    virtual page:    C[v] += C[i] - k * share
    C[i] = 0

and after each batch the virtual page is crawled too: it spreads its cash over the pages in
proportion to the interest weights ``w`` (uniform by default), ``H[v]`` and ``G`` growing by
what it gave. The total cash stays 1 (Lemma 2.2) and ``H[j] + C[j] = C0[j] + sum_i L[i, j]
H[i]`` (Lemma 2.3, ``L`` the transfer matrix above). The importance estimate is the paper's
``(H[i] + C[i]) / (G + 1)``; normalized over the real pages (divided by ``1 - `` the virtual
page's share) it converges, whatever the fair crawl order, to PageRank with damping ``d`` and
teleport/dangling vector ``w`` (:func:`estimators.pagerank.pagerank`): the random walk that goes
through ``v`` with probability ``1 - d`` (always, from a dangling page) and leaves it by ``w``.

**Exact conservation.** Cash is a float64 holding a whole number of quanta ``2**-52`` of the
total (:data:`CASH_QUANTUM`). Shares are rounded *down* to a quantum and the rounding goes to the
virtual page, so every sum of cash is a sum of whole quanta below ``2**53``: exact in float64.
``cash_.sum() == 1.0`` holds exactly after any number of transfers, not just to rounding error
(Nutch's OPIC plugin never takes the cash from the crawled page and inflates). The rounding
moves at most one quantum per transfer, 2e-16 of the total: far below any cash that matters.

**Batches.** :meth:`OPIC.crawl` crawls a batch of distinct pages at once, as a distributed
crawler does with buffered money transfers: each page gives the cash it held at the start of
the batch; cash it receives within the batch waits for its next crawl. Lemmas 2.2-2.3 hold for
batches (every unit added to ``H[i]`` is what ``i`` gave its children), so the convergence
proof carries over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from estimators.opic_graph import GraphError, LinkGraph, UnknownPageError
from estimators.opic_windows import FullHistory, HistoryWindow

__all__ = [
    "CASH_QUANTUM",
    "CRAWL_CASH_QUANTUM",
    "DEFAULT_DAMPING",
    "OPIC",
    "OpicState",
    "crawl_cash_split",
    "crawl_virtual_gift",
    "interest_weights",
    "split_cash",
    "spread_cash",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Smallest unit of cash; the total is ``2**52`` of them.
CASH_QUANTUM = 2.0**-52
_UNITS = 2.0**52

#: Unit of cash in the crawl (:func:`crawl_cash_split`), where every page brings one unit: whole
#: quanta stay exact in float64 (and in the database's double precision) up to 2**27 pages.
CRAWL_CASH_QUANTUM = 2.0**-26

#: PageRank's damping (share of a page's cash its links carry), as the reference uses.
DEFAULT_DAMPING = 0.85


def split_cash(
    cash: FloatArray, out_degree: IntArray, damping: float, quantum: float = CASH_QUANTUM
) -> tuple[FloatArray, FloatArray]:
    """Share of each crawled page's cash per outlink, and the rest for the virtual page.

    Parameters
    ----------
    cash : ndarray of float, shape (b,)
        Cash of the crawled pages, whole quanta.
    out_degree : ndarray of int, shape (b,)
        Their outlinks ``k`` (0: dangling).
    damping : float
        Share ``d`` in [0, 1] the links carry.
    quantum : float
        The unit of cash, a power of two (:data:`CASH_QUANTUM`, or :data:`CRAWL_CASH_QUANTUM`
        in the crawl).

    Returns
    -------
    share, rest : ndarray of float, shape (b,)
        ``share = floor(d * cash / k)`` in whole quanta (0 when ``k == 0``) and ``rest = cash
        - k * share``; ``k * share + rest == cash`` exactly.
    """
    units = cash / quantum  # exact: a power-of-two scaling of whole quanta
    to_links = np.floor(units * damping)
    k = out_degree.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(k > 0, np.floor(to_links / k), 0.0)
    # floor(fl(x / k)) may round up past x / k only in theory; keep k * share <= x exactly.
    share = np.where(share * k > to_links, share - 1.0, share)
    rest = units - share * k
    return share * quantum, rest * quantum


def spread_cash(
    amount: float, weights: FloatArray | None, n_pages: int
) -> tuple[FloatArray, float]:
    """The virtual page's gift to every page, and what it keeps (whole quanta, exact).

    Parameters
    ----------
    amount : float
        The virtual page's cash, whole quanta.
    weights : ndarray of float, shape (n_pages,), or None
        Interest weights summing to 1 (None: uniform).
    n_pages : int
        Number of real pages.

    Returns
    -------
    gift : ndarray of float, shape (n_pages,)
        ``floor(amount * w_i)`` quanta each.
    kept : float
        ``amount - gift.sum()``, exactly, >= 0.
    """
    units = amount * _UNITS
    if weights is None:
        each = np.floor(units / n_pages)
        if each * n_pages > units:
            each -= 1.0
        return np.full(n_pages, each * CASH_QUANTUM), (units - each * n_pages) * CASH_QUANTUM
    # The 1 - 2**-40 guards against weights whose float sum exceeds 1 by rounding.
    gift = np.floor(units * (1.0 - 2.0**-40) * weights)
    given = float(gift.sum())
    return gift * CASH_QUANTUM, (units - given) * CASH_QUANTUM


def crawl_cash_split(
    cash: list[float], out_degree: list[int], damping: float = DEFAULT_DAMPING
) -> list[float]:
    """Share per outlink of each fetched page's cash, in the crawl (whole crawl quanta).

    The store moves ``share`` to each outlink and takes ``cash`` from the page; the rest, and
    all the cash of a page without outlinks, goes to the virtual page, which the store keeps
    implicit as ``pages - sum(cash)`` (every page brings one unit of cash). See
    :func:`crawl_virtual_gift`.

    Parameters
    ----------
    cash : list of float, length b
        Cash of the fetched pages (whole multiples of :data:`CRAWL_CASH_QUANTUM`).
    out_degree : list of int, length b
        Their distinct outlinks, self-links excluded.
    damping : float
        Share of the cash the links carry.
    """
    share, _ = split_cash(
        np.asarray(cash, dtype=np.float64),
        np.asarray(out_degree, dtype=np.int64),
        damping,
        CRAWL_CASH_QUANTUM,
    )
    return [float(v) for v in share]


def crawl_virtual_gift(n_pages: int, total_cash: float) -> float:
    """What the crawl's virtual page gives every page: ``floor((n - sum C) / n)`` quanta.

    The virtual page holds ``n_pages - total_cash`` (one unit per page, minus what the pages
    hold); giving each page this amount leaves it >= 0 even if pages are added meanwhile
    (each brings one unit and the gift is at most one unit).
    """
    if n_pages <= 0:
        return 0.0
    virtual = max(0.0, n_pages - total_cash) / CRAWL_CASH_QUANTUM
    each = np.floor(virtual / n_pages)
    if each * n_pages > virtual:
        each -= 1.0
    return float(max(each, 0.0) * CRAWL_CASH_QUANTUM)


def interest_weights(
    interest: ArrayLike, boost: float = 10.0, n_pages: int | None = None
) -> FloatArray:
    """Teleport weights that bias cash toward pages of interest, summing to 1.

    Parameters
    ----------
    interest : array-like of bool or float, shape (n_pages,)
        A mask of the pages of interest (a URL pattern or content type matched), or
        non-negative weights taken as they are.
    boost : float
        For a mask: how many times a page of interest gets what another gets (> 0).
    n_pages : int, optional
        Expected length, checked.

    Returns
    -------
    ndarray of float, shape (n_pages,)
        Non-negative, summing to 1 (to rounding).
    """
    values = np.asarray(interest)
    if n_pages is not None and values.shape != (n_pages,):
        raise ValueError(f"interest must have shape ({n_pages},), got {values.shape}")
    if values.dtype == bool:
        if not boost > 0:
            raise ValueError(f"boost must be > 0, got {boost}")
        weights = np.where(values, float(boost), 1.0)
    else:
        weights = values.astype(np.float64)
        if not np.all(np.isfinite(weights)) or np.any(weights < 0) or weights.sum() <= 0:
            raise ValueError("interest weights must be finite, >= 0 and not all 0")
    return np.asarray(weights / weights.sum(), dtype=np.float64)


@dataclass
class OpicState:
    """The mutable state of an OPIC run (arrays are updated in place).

    Attributes
    ----------
    cash : ndarray of float, shape (n_pages + 1,)
        ``C``; index ``n_pages`` is the virtual page. Whole quanta, summing to exactly 1.
    history : ndarray of float, shape (n_pages + 1,)
        ``H``, the cash each page has given so far (virtual page last).
    initial_cash : ndarray of float, shape (n_pages + 1,)
        ``C0``.
    clock : float
        ``G = sum(H)``, the total cash ever given.
    crawls, transfers : int
        Pages crawled, and cash transfers made along links (one per link of a crawled page).
    """

    cash: FloatArray
    history: FloatArray
    initial_cash: FloatArray
    clock: float = 0.0
    crawls: int = 0
    transfers: int = 0

    @classmethod
    def start(cls, n_pages: int) -> OpicState:
        """Cash ``1/n`` per page (whole quanta; the rounding on the virtual page)."""
        each = np.floor(_UNITS / n_pages) * CASH_QUANTUM
        cash = np.full(n_pages + 1, each)
        cash[n_pages] = (_UNITS - np.floor(_UNITS / n_pages) * n_pages) * CASH_QUANTUM
        return cls(cash=cash, history=np.zeros(n_pages + 1), initial_cash=cash.copy())

    @property
    def n_pages(self) -> int:
        """Number of real pages."""
        return int(self.cash.size - 1)


def _gather_links(graph: LinkGraph, pages: IntArray) -> tuple[IntArray, IntArray]:
    """Out-degree of each page in ``pages`` and the targets of all their links (row order)."""
    starts = graph.indptr[pages]
    counts = graph.indptr[pages + 1] - starts
    total = int(counts.sum())
    # Position of each gathered link in `indices`: its row's start plus its rank in the row.
    first = np.cumsum(counts) - counts
    positions = np.repeat(starts - first, counts) + np.arange(total, dtype=np.int64)
    return counts, graph.indices[positions]


class OPIC:
    """On-line page importance, optionally adaptive (a window) and biased (interest weights).

    Parameters
    ----------
    damping : float
        Share ``d`` in [0, 1] of a crawled page's cash its links carry; the rest goes to the
        virtual page (PageRank's damping; 1: links carry all, only dangling pages feed ``v``).
    window : HistoryWindow, optional
        Window policy for the estimate (:class:`~estimators.opic_windows.InterpolationWindow`,
        :class:`~estimators.opic_windows.VariableWindow`); default the full history.
    interest : ndarray of float, shape (n_pages,), optional
        Weights by which the virtual page spreads its cash (see :func:`interest_weights`);
        default uniform. Total cash is conserved either way.

    Attributes
    ----------
    state_ : OpicState
        Cash, history and clock after :meth:`start`.
    window_ : HistoryWindow
        The window policy in use.
    """

    def __init__(
        self,
        *,
        damping: float = DEFAULT_DAMPING,
        window: HistoryWindow | None = None,
        interest: FloatArray | None = None,
    ) -> None:
        self.damping = damping
        self.window = window
        self.interest = interest

    def start(self, n_pages: int) -> OPIC:
        """Initial state for ``n_pages`` pages: cash ``1/n`` each, no history."""
        if n_pages <= 0:
            raise GraphError(f"OPIC needs at least one page, got n_pages = {n_pages}")
        if not 0.0 <= self.damping <= 1.0:
            raise ValueError(f"damping must be in [0, 1], got {self.damping}")
        if self.interest is not None:
            self.interest = interest_weights(self.interest, n_pages=n_pages)
        self.state_ = OpicState.start(n_pages)
        self.window_: HistoryWindow = self.window if self.window is not None else FullHistory()
        self.window_.reset(n_pages)
        return self

    def crawl(self, graph: LinkGraph, pages: ArrayLike) -> OPIC:
        """Crawl a batch of pages: move their cash to their outlinks, then spread ``v``'s cash.

        Parameters
        ----------
        graph : LinkGraph
            The links as the crawl sees them now (it may change between calls; same pages).
        pages : array-like of int, shape (b,)
            Pages crawled in this batch; repeats count once.
        """
        st = self.state_
        n = st.n_pages
        if graph.n_pages != n:
            raise GraphError(f"the graph has {graph.n_pages} pages, the OPIC state {n}")
        batch = np.sort(np.asarray(pages, dtype=np.int64).ravel())
        if batch.size > 1:
            batch = batch[np.r_[True, batch[1:] != batch[:-1]]]
        if batch.size and (batch[0] < 0 or batch[-1] >= n):
            raise UnknownPageError(f"crawled pages must be in 0..{n - 1}")
        cash = st.cash
        clock = st.clock
        taken = cash[batch]
        cash[batch] = 0.0
        st.history[batch] += taken
        self.window_.record(batch, taken, clock)
        degree, targets = _gather_links(graph, batch)
        share, rest = split_cash(taken, degree, self.damping)
        gifts = np.repeat(share, degree)
        if targets.size > n // 32:  # bincount is O(n), add.at O(links)
            cash[:n] += np.bincount(targets, weights=gifts, minlength=n)
        else:
            np.add.at(cash, targets, gifts)
        cash[n] += rest.sum()
        # The virtual page is crawled after every batch.
        gift, kept = spread_cash(float(cash[n]), self.interest, n)
        given = float(cash[n]) - kept
        cash[:n] += gift
        cash[n] = kept
        st.history[n] += given
        st.clock = clock + float(taken.sum()) + given
        st.crawls += int(batch.size)
        st.transfers += int(targets.size)
        return self

    def raw_importance(self) -> FloatArray:
        """The paper's estimate ``(H[i] + C[i]) / (G + 1)``, shape (n_pages,).

        It counts the virtual page among the pages, so it sums to ``1 - `` the virtual page's
        share; :meth:`importance` renormalizes it over the real pages.
        """
        st = self.state_
        n = st.n_pages
        return (st.history[:n] + st.cash[:n]) / (st.clock + 1.0)

    def importance(self) -> FloatArray:
        """Importance of every page, shape (n_pages,), summing to 1: the window's estimate.

        With the full history this is ``(H[i] + C[i]) / sum_j (H[j] + C[j])`` over the real
        pages, which tends to PageRank.
        """
        st = self.state_
        n = st.n_pages
        estimate = self.window_.estimate(st.cash[:n], st.clock)
        total = float(estimate.sum())
        return estimate / total if total > 0 else np.full(n, 1.0 / n)

    def total_cash(self) -> float:
        """Sum of all cash, virtual page included: exactly 1."""
        return float(self.state_.cash.sum())

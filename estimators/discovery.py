"""Discovery rates of the WebFountain model from counts the crawl measured.

The model (Edwards et al. 2001, eq. (3)) says how the pool of never-crawled pages grows::

    new pages found in a period = oldnwt * (old pages crawled) + newnwt * (new pages crawled)
                                  + nconst

The crawl does not record which fetch found which URL, but it counts per time bin the fetches
of old pages ``O_k``, the first fetches of new pages ``N_k`` and the pages first seen ``D_k``.
The three rates are the non-negative least-squares fit of ``D_k = oldnwt O_k + newnwt N_k +
c`` over the bins (``nconst`` is ``c`` scaled from a bin to a period). When the bins cannot
tell old from new crawls apart (too few bins, or one kind of crawl never varies) the fit is
not identifiable, and one pooled ratio ``sum D / sum (O + N)`` serves both, with ``nconst``
0: the honest estimate from what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import nnls

__all__ = ["DiscoveryRates", "discovery_rates"]


@dataclass(frozen=True)
class DiscoveryRates:
    """New pages found per old-page crawl, per new-page crawl, and per period from outside.

    ``method`` is ``"nnls"`` (the three-term fit), ``"pooled"`` (one ratio) or ``"none"`` (no
    crawl was measured: all rates 0).
    """

    oldnwt: float
    newnwt: float
    nconst: float
    method: str


def discovery_rates(
    old_crawls: ArrayLike,
    new_crawls: ArrayLike,
    discovered: ArrayLike,
    *,
    bin_seconds: float,
    period_seconds: float,
    min_bins: int = 6,
) -> DiscoveryRates:
    """Fit the discovery rates to per-bin counts.

    Parameters
    ----------
    old_crawls, new_crawls, discovered : array_like of int, shape (bins,)
        Per time bin: fetches of previously fetched pages, first fetches, pages first seen.
    bin_seconds, period_seconds : float
        Width of a bin and length of a plan period, seconds (``nconst`` is per period).
    min_bins : int
        Fewest bins with crawls for the three-term fit; fewer falls back to the pooled ratio.
    """
    old = np.asarray(old_crawls, dtype=float)
    new = np.asarray(new_crawls, dtype=float)
    found = np.asarray(discovered, dtype=float)
    if not (old.shape == new.shape == found.shape) or old.ndim != 1:
        raise ValueError("old_crawls, new_crawls and discovered need one value per bin")
    if not (bin_seconds > 0 and period_seconds > 0):
        raise ValueError("bin_seconds and period_seconds must be > 0")
    crawls = old.sum() + new.sum()
    if crawls <= 0:
        return DiscoveryRates(0.0, 0.0, 0.0, "none")
    active = (old + new) > 0
    design = np.column_stack([old, new, np.ones_like(old)])[active]
    if active.sum() >= min_bins and np.linalg.matrix_rank(design) == 3:
        # Columns scaled to unit norm so that the fit does not favour the large counts.
        norms = np.linalg.norm(design, axis=0)
        coef, _ = nnls(design / norms, found[active])
        oldnwt, newnwt, per_bin = coef / norms
        return DiscoveryRates(
            float(oldnwt), float(newnwt), float(per_bin * period_seconds / bin_seconds), "nnls"
        )
    ratio = float(found.sum() / crawls)
    return DiscoveryRates(ratio, ratio, 0.0, "pooled")

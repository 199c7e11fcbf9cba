"""Change rates as a policy knows them: the truth (an oracle run) or its own estimates.

Imports: :mod:`scenarios.policies.base`, :mod:`scenarios.simulator`, ``estimators``, numpy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from estimators.estimator_choice import ChangeRateEstimator
from estimators.evidence import last_modified_evidence_from_fetches
from estimators.prior import LogNormalRatePrior
from estimators.reliability import assess_last_modified
from scenarios.policies.base import PolicyError
from scenarios.simulator import CrawlLog

__all__ = ["PRIOR_PAGES", "PRIOR_REFITS", "RateKnowledge", "filled_rates"]

FloatArray = npt.NDArray[np.float64]

#: Pages sampled to fit the population prior of change rates at each refit.
PRIOR_PAGES = 3000
#: Rate refits between two fits of the population prior.
PRIOR_REFITS = 4


class RateKnowledge:
    """Change rates per page as the policy knows them.

    Parameters
    ----------
    rates : ``"true"`` (needs an oracle run) or ``"estimated"``.
    refit_every : periods between two estimations.
    last_modified : ``"ignore"``, ``"checked"`` (use dates that pass
        :func:`estimators.reliability.assess_last_modified`) or ``"trusted"`` (use them all).
    """

    def __init__(
        self, rates: str = "estimated", refit_every: int = 7, last_modified: str = "ignore"
    ) -> None:
        if rates not in ("true", "estimated"):
            raise PolicyError(f"rates: use 'true' or 'estimated', got {rates!r}")
        if last_modified not in ("ignore", "checked", "trusted"):
            raise PolicyError(
                f"last_modified: use 'ignore', 'checked' or 'trusted', got {last_modified!r}"
            )
        if refit_every < 1:
            raise PolicyError("refit_every: give at least 1 period")
        self.rates = rates
        self.refit_every = refit_every
        self.last_modified = last_modified
        self._rate: FloatArray | None = None
        self._fitted_at = -(10**9)
        self._prior: LogNormalRatePrior | None = None
        self._fits = 0

    def due(self, period: int) -> bool:
        """Whether the rates are refitted in ``period``."""
        return period - self._fitted_at >= self.refit_every or self._rate is None

    def rate(self, log: CrawlLog, period: int) -> FloatArray:
        """Rates of every page (NaN where nothing is known), refitted when due, shape (n,)."""
        if self.rates == "true":
            if log.true_rate is None:
                raise PolicyError("rates = 'true' needs an oracle run (the simulator's oracle)")
            return log.true_rate
        if self.due(period) or self._rate is None:
            self._rate = self._estimate(log)
            self._fitted_at = period
        return self._rate

    def _estimate(self, log: CrawlLog) -> FloatArray:
        intervals = log.change_intervals()
        if intervals.page.size == 0:
            return np.full(log.n_pages, np.nan)
        # The population prior moves slowly: it is refitted every PRIOR_REFITS refits only,
        # on a sample of pages and a coarser grid than production's defaults (each fit costs
        # about half a second).
        if self._prior is None or self._fits % PRIOR_REFITS == 0:
            self._prior = LogNormalRatePrior(max_pages=PRIOR_PAGES, grid_step=0.1)
        self._fits += 1
        estimator = ChangeRateEstimator(prior=self._prior)
        if self.last_modified == "ignore":
            return np.asarray(estimator.fit(intervals).rate_, dtype=float)
        page, at, changed, lm = log.fetch_log()
        evidence = last_modified_evidence_from_fetches(page, at, lm, n_pages=log.n_pages)
        if self.last_modified == "trusted":
            reliable = evidence.intervals > 0
        else:
            reliable = assess_last_modified(
                page, at, changed, lm, n_pages=log.n_pages, host=log.host
            ).reliable
        return np.asarray(estimator.fit(intervals, evidence, reliable).rate_, dtype=float)


def filled_rates(rate: FloatArray, log: CrawlLog) -> FloatArray:
    """Rates with the unknown ones (NaN) replaced by the median known rate, or by the
    uniform guess budget / known pages when nothing is known yet."""
    known = rate[np.isfinite(rate) & log.eligible]
    fill = float(np.median(known)) if known.size else log.budget / max(1, int(log.eligible.sum()))
    return np.where(np.isfinite(rate), rate, fill)

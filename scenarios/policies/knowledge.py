"""Change rates as a policy knows them: the truth (an oracle run), its own point estimates, or
its own Gamma posteriors (:class:`estimators.posterior.GammaRatePosterior`, priors by host and
site section: what a crawler knows from URLs).

Imports: :mod:`scenarios.policies.base`, :mod:`scenarios.simulator`, ``estimators``, numpy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from estimators.bayes_action import (
    PROBE_SHARE,
    Probes,
    bayes_equivalent_rates,
    bayes_refresh,
    evidence_grid,
    fit_bayes_plan,
    grid_log_likelihood,
    plan_chunk,
)
from estimators.estimator_choice import ChangeRateEstimator
from estimators.evidence import LastModifiedEvidence, last_modified_evidence_from_fetches
from estimators.gamma_updates import RatePosterior
from estimators.posterior import GammaRatePosterior
from estimators.prior import LogNormalRatePrior
from estimators.reliability import assess_last_modified
from scenarios.policies.base import PolicyError
from scenarios.simulator import CrawlLog

__all__ = [
    "ORACLE_RATES",
    "PRIOR_PAGES",
    "PRIOR_REFITS",
    "RATES",
    "RateKnowledge",
    "filled_rates",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: What a policy may know of the rates (:class:`RateKnowledge`).
RATES = (
    "true",
    "estimated",
    "posterior",
    "bayes",
    "bayes, true prior",
    "bayes, true section prior",
)
#: The ``rates`` that read the world's true rates: a simulation runs them as oracle runs.
ORACLE_RATES = ("true", "bayes, true prior", "bayes, true section prior")
#: Pages' worth of the population's true histogram mixed into a section's in the
#: ``"bayes, true section prior"`` bound, so that no rate the section lacks is impossible.
ORACLE_SECTION_PULL = 1.0
#: Pages sampled to fit the population prior of change rates at each refit.
PRIOR_PAGES = 3000
#: Rate refits between two fits of the population prior, once it has settled: it is fitted
#: again sooner whenever the pages with an interval have grown by half since its last fit.
PRIOR_REFITS = 4
#: Growth of the pages with a change/no-change interval that refits the prior at once.
PRIOR_GROWTH = 1.5


class RateKnowledge:
    """Change rates per page as the policy knows them.

    Parameters
    ----------
    rates : ``"true"`` (needs an oracle run), ``"estimated"`` (point estimates) or
        ``"posterior"`` (a Gamma posterior per page, :meth:`posterior`; :meth:`rate` gives
        its mean) or ``"bayes"`` (each page's Bayes-equivalent rate,
        :func:`estimators.bayes_action.bayes_equivalent_rates`: its posterior on a log-rate
        grid under a prior fitted to the population, at the mean budget). Two bounds, for
        oracle runs: ``"bayes, true prior"``, the same under the histogram of the live pages'
        true rates instead of the fitted prior, and ``"bayes, true section prior"``, under
        the histogram of the true rates of the other live pages of its site section (what
        the best prior by section could know). Each page's evidence is its own: they bound
        what any prior, pooled or hierarchical, adds to the evidence the crawl gathered.
    refit_every : periods between two estimations.
    last_modified : ``"checked"`` (the default, as ``crawlplan estimate`` and the nightly run
        do: use the dates that pass :func:`estimators.reliability.assess_last_modified`),
        ``"ignore"`` (change/no-change intervals alone) or ``"trusted"`` (every date).
    probe_horizon : periods over which what a probe teaches is counted (``rates = "bayes"``;
        0: none). Each refit then leaves in :attr:`probes` the fetched pages worth a probe
        (:func:`estimators.bayes_action.choose_probes`), best first, for the policy to crawl,
        and with ``follow_ups`` those worth a follow-up.
    follow_ups : whether pages whose lesson pays for one crawl, not two, get a follow-up (a
        probe whose first crawl is the page's next planned one).
    """

    def __init__(
        self,
        rates: str = "estimated",
        refit_every: int = 7,
        last_modified: str = "checked",
        probe_horizon: float = 0.0,
        follow_ups: bool = False,
    ) -> None:
        if rates not in RATES:
            raise PolicyError(f"rates: use one of {', '.join(map(repr, RATES))}, got {rates!r}")
        if last_modified not in ("ignore", "checked", "trusted"):
            raise PolicyError(
                f"last_modified: use 'ignore', 'checked' or 'trusted', got {last_modified!r}"
            )
        if refit_every < 1:
            raise PolicyError("refit_every: give at least 1 period")
        if not (np.isfinite(probe_horizon) and probe_horizon >= 0):
            raise PolicyError(f"probe_horizon: give >= 0 periods (0: none), got {probe_horizon}")
        self.probe_horizon = float(probe_horizon)
        self.follow_ups = bool(follow_ups)
        self.rates = rates
        self.refit_every = refit_every
        self.last_modified = last_modified
        self._rate: FloatArray | None = None
        self._fitted_at = -(10**9)
        self._prior: LogNormalRatePrior | None = None
        self._prior_pages = 0
        self._fits = 0
        self._posterior: RatePosterior | None = None
        self._posterior_fit: GammaRatePosterior | None = None
        self.probes = Probes(np.zeros(0, np.intp), np.zeros(0), float("nan"))

    def due(self, period: int) -> bool:
        """Whether the rates are refitted in ``period``."""
        return period - self._fitted_at >= self.refit_every or self._rate is None

    def rate(self, log: CrawlLog, period: int) -> FloatArray:
        """Rates of every page (NaN where nothing is known), refitted when due, shape (n,)."""
        if self.rates == "true":
            if log.true_rate is None:
                raise PolicyError("rates = 'true' needs an oracle run (the simulator's oracle)")
            return log.true_rate
        if self.rates == "posterior":
            return self.posterior(log, period).mean
        if self.due(period) or self._rate is None:
            if self.rates == "bayes":
                self._rate = self._bayes(log)
            elif self.rates in ORACLE_RATES:
                self._rate = self._oracle_prior(log)
            else:
                self._rate = self._estimate(log)
            self._fitted_at = period
        return self._rate

    def posterior(self, log: CrawlLog, period: int) -> RatePosterior:
        """Gamma posterior of every page's rate (``beta`` in periods), refitted when due.

        Needs ``rates = "posterior"``. Priors: the population's, then per host, then per site
        section (``log.host``, ``log.section``), by empirical Bayes; a page never fetched gets
        its section's prior. Before any evidence, every page gets ``Gamma(1, pages / budget)``
        (mean: the uniform crawl rate). The fitted priors are in :attr:`posterior_fit`.
        """
        if self.rates != "posterior":
            raise PolicyError("posterior: build RateKnowledge with rates='posterior'")
        if self.due(period) or self._posterior is None:
            self._posterior = self._fit_posterior(log)
            self._rate = self._posterior.mean
            self._fitted_at = period
        return self._posterior

    @property
    def posterior_fit(self) -> GammaRatePosterior | None:
        """The last posterior fit (its ``population_prior_`` and ``group_priors_``), or None."""
        return self._posterior_fit

    def _fit_posterior(self, log: CrawlLog) -> RatePosterior:
        intervals = log.change_intervals()
        evidence: LastModifiedEvidence | None = None
        reliable = None
        if self.last_modified != "ignore":
            page, at, changed, lm = log.fetch_log()
            evidence = last_modified_evidence_from_fetches(
                page, at, lm, n_pages=log.n_pages, created_between=log.created_between()
            )
            if self.last_modified == "trusted":
                reliable = np.ones(log.n_pages, dtype=np.bool_)
            else:
                reliability = assess_last_modified(
                    page, at, changed, lm, n_pages=log.n_pages, host=log.host
                )
                reliable = reliability.reliable
                evidence = evidence.believed(reliability.verified)
        dated = False
        if evidence is not None and reliable is not None:
            single = evidence.single_fetch_age
            has_date = evidence.intervals > 0
            if single is not None:
                has_date |= np.isfinite(single)
            dated = bool(np.any(reliable & has_date))
        if intervals.page.size == 0 and not dated:
            fill = max(1, int(log.eligible.sum())) / max(1, log.budget)
            n = log.n_pages
            return RatePosterior(np.ones(n), np.full(n, float(fill)), np.zeros(n, np.intp))
        fit = GammaRatePosterior(max_pages=PRIOR_PAGES).fit(
            intervals,
            groups=[("host", log.host), ("section", log.section)],
            last_modified=evidence,
            reliable=reliable,
        )
        self._posterior_fit = fit
        return fit.posterior_

    def _bayes(self, log: CrawlLog) -> FloatArray:
        """Bayes-equivalent rates of the live fetched pages (NaN elsewhere), per period, at
        the mean budget: what the nightly run plans with (``plan.rates = "bayes"``), its
        prior fitted on every page with evidence and its price on the live fetched pages (a
        dead page takes no crawl; a never-fetched one is the plan's new pages)."""
        intervals = log.change_intervals()
        evidence, reliable = self._dates(log)
        fetched = log.eligible & (log.fetches > 0)
        plan = fit_bayes_plan(
            float(log.mean_budget), intervals, evidence, reliable, sharing=fetched
        )
        if plan is None:
            return np.full(log.n_pages, np.nan)
        rates, probes = plan_chunk(
            plan,
            intervals,
            evidence,
            reliable,
            horizon=self.probe_horizon or None,
            shortest=1.0,  # a period: the simulator's clock
            # as the nightly run: a share of the capacity of the periods between two refits
            probe_limit=int(PROBE_SHARE * float(log.mean_budget) * self.refit_every / 2),
            follow_ups=self.follow_ups,
            # as the nightly run: a share of the fetched pages, their second crawls about
            # that share of the planned crawls
            follow_limit=int(PROBE_SHARE * np.count_nonzero(fetched)),
        )
        on, follow = fetched[probes.page], fetched[probes.follow]
        self.probes = Probes(
            probes.page[on],
            probes.net[on],
            probes.delay,
            probes.follow[follow],
            probes.follow_net[follow],
            probes.as_follow_up[on],
        )
        return np.where(fetched, rates, np.nan)

    def _oracle_prior(self, log: CrawlLog) -> FloatArray:
        """Bayes-equivalent rates of the live fetched pages (NaN elsewhere) under the true
        rates' histogram on the grid (the population's, or with ``"bayes, true section
        prior"`` each page's section's less the page itself), the price spending the mean
        budget on them: the ``"bayes"`` plan with an oracle's prior."""
        if log.true_rate is None:
            raise PolicyError(f"rates = {self.rates!r} needs an oracle run (the simulator's)")
        intervals = log.change_intervals()
        evidence, reliable = self._dates(log)
        fetched = log.eligible & (log.fetches > 0)
        grid = evidence_grid(intervals, evidence)
        if grid is None or not fetched.any():
            return np.full(log.n_pages, np.nan)
        loglik, has = grid_log_likelihood(grid, intervals, evidence, reliable)
        loglik[~has] = 0.0
        step = float(grid[1] - grid[0])
        cell = np.clip(np.rint((np.log(log.true_rate) - grid[0]) / step), 0, grid.size - 1)
        cell = cell.astype(np.intp)
        live = np.flatnonzero(log.eligible)
        population = np.bincount(cell[live], minlength=grid.size) / live.size
        if self.rates == "bayes, true prior":
            prior = np.broadcast_to(population, loglik.shape)
        else:
            counts = np.zeros((int(log.section.max()) + 1, grid.size))
            np.add.at(counts, (log.section[live], cell[live]), 1.0)
            own = np.zeros_like(loglik)
            own[live, cell[live]] = 1.0
            prior = counts[log.section] - own + ORACLE_SECTION_PULL * population
        post = np.exp(loglik - loglik.max(axis=1, keepdims=True)) * prior
        post /= post.sum(axis=1, keepdims=True)
        price = bayes_refresh(grid, post[fetched], float(log.mean_budget)).price
        rates = bayes_equivalent_rates(grid, post, price=price)[0]
        return np.where(fetched, rates, np.nan)

    def _dates(self, log: CrawlLog) -> tuple[LastModifiedEvidence | None, BoolArray | None]:
        """The Last-Modified evidence the policy reads, and which pages' dates it believes."""
        if self.last_modified == "ignore":
            return None, None
        page, at, changed, lm = log.fetch_log()
        evidence = last_modified_evidence_from_fetches(
            page, at, lm, n_pages=log.n_pages, created_between=log.created_between()
        )
        if self.last_modified == "trusted":
            return evidence, evidence.intervals > 0
        reliability = assess_last_modified(
            page, at, changed, lm, n_pages=log.n_pages, host=log.host
        )
        return evidence.believed(reliability.verified), reliability.reliable

    def _estimate(self, log: CrawlLog) -> FloatArray:
        intervals = log.change_intervals()
        if intervals.page.size == 0:
            return np.full(log.n_pages, np.nan)
        # Production fits the population prior every night. Here, where each fit costs about
        # half a second (on a sample of pages and a coarser grid than production's), it is
        # refitted every PRIOR_REFITS refits once it has settled, and at once while the pages
        # it can be fitted to still grow fast: a prior fitted in the first lap, to the few
        # pages with an interval then, would otherwise hold every thin page's estimate for
        # PRIOR_REFITS x refit_every periods (on a log-uniform web, 0.08-0.11 a period for
        # pages from 0.01 to 10). A prior whose sigma the evidence could not fit yet (held at
        # its default) is refitted at every refit until it can.
        with_interval = int(np.count_nonzero(intervals.n_intervals))
        if (
            self._prior is None
            or self._fits % PRIOR_REFITS == 0
            or with_interval >= PRIOR_GROWTH * self._prior_pages
            or not getattr(self._prior, "sigma_fitted_", True)
        ):
            self._prior = LogNormalRatePrior(max_pages=PRIOR_PAGES, grid_step=0.1)
            self._prior_pages = with_interval
        self._fits += 1
        estimator = ChangeRateEstimator(prior=self._prior)
        evidence, reliable = self._dates(log)
        if evidence is None or reliable is None:
            return np.asarray(estimator.fit(intervals).rate_, dtype=float)
        return np.asarray(estimator.fit(intervals, evidence, reliable).rate_, dtype=float)


def filled_rates(rate: FloatArray, log: CrawlLog) -> FloatArray:
    """Rates with the unknown ones (NaN) replaced by the median known rate, or by the
    uniform guess budget / known pages when nothing is known yet."""
    known = rate[np.isfinite(rate) & log.eligible]
    fill = float(np.median(known)) if known.size else log.budget / max(1, int(log.eligible.sum()))
    return np.where(np.isfinite(rate), rate, fill)

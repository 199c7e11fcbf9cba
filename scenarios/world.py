"""Synthetic worlds with ground truth: pages, hosts, site sections, change processes (vectorized).

A :class:`World` is built once from a :class:`WorldSpec` and a seed; it does no I/O and holds
every page of the whole run (pages born later are allocated up front and switched on at their
birth period). Time is counted in **periods** (the planner's period: ``period_days`` days);
change rates are **changes per period**.

What a world models (REFERENCE.md sec. 7):

* **Hosts and site sections.** Host sizes follow a Zipf law (``host_skew``); each host has
  ``sections_per_host`` sections. A page's URL tells the crawler its host and section.
* **Change rates** spread over orders of magnitude. ``rate_model``:
  ``"mixture"`` (default) a two-cluster mixture of log-normals, fast churners plus near-static
  pages; ``"lognormal"`` one log-normal; ``"loguniform"`` log-uniform between ``rate_low``
  and ``rate_high`` (the live demo's web); ``"webfountain"`` the WebFountain paper's
  Brewington & Cybenko mean-lifetime distribution (its Table 2, as in
  :mod:`planner.model.paper_instances`), versions 1-3; ``"constant"`` every page at ``rate``
  (for closed-form checks). Rates of a section share a log-normal factor
  (``section_sigma``): pages of one section change alike.
* **Rhythms** (non-Poisson): ``weekday_rhythm`` in [0, 1) lowers the weekend rate of every
  page to ``1 - weekday_rhythm`` of the weekday rate (mean over a week kept at the page's
  rate; needs ``period_days = 1``); ``working_hours`` in [0, 1) is the share of a day's
  changes that fall between 9:00 and 17:00 on top of the uniform share (within-period timing).
* **Bursts**, correlated within a section: in a period, a section bursts with probability
  ``burst_probability`` and its pages' rates are multiplied by ``burst_factor``.
* **Births and deaths**: ``birth_rate`` new pages per period (share of the initial pages),
  placed on existing hosts and sections; each page dies with probability ``death_rate`` per
  period. A page born during the run is known to the crawler (links, sitemaps) from its birth.
* **Politeness**: the ``polite_hosts`` largest hosts accept at most ``polite_cap`` crawls per
  period each (a politeness delay of ``1 / polite_cap`` periods); the simulator crawls no more
  (:attr:`World.host_cap`). Drawn from nothing: a world's pages and changes do not depend on
  it.
* **Importance**: log-normal (``importance_sigma``), a host factor times a page factor,
  centered on 1; or, with ``links_per_page > 0``, a **link graph** (each page links to about
  ``links_per_page`` pages, ``host_link_share`` of them on its own host, the others chosen in
  proportion to that log-normal weight, so links concentrate on important pages) whose
  PageRank, centered on 1, is the ground-truth importance. The simulator can then estimate
  importance with OPIC as the crawl goes (:class:`scenarios.simulator.SimulationSettings`).
* **Last-Modified servers**: per host, one behaviour drawn from ``last_modified`` shares:
  ``honest`` (the date of the last change), ``missing`` (no header), ``now`` (always the fetch
  time), ``random`` (moves at random, with or without a change) and ``static`` (one template
  date, :data:`STATIC_DATE_AGE` periods before the start, for every page, whatever changes).

Changes are drawn per period by :meth:`World.period_changes` in two segments per page, split
at the page's fixed crawl slot ``slot`` (the crawler's fixed visiting order inside a period):
so the ground truth is the same whichever policy crawls, and policies are compared on common
random numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np
import numpy.typing as npt

from estimators.opic_graph import LinkGraph
from estimators.pagerank import pagerank

__all__ = [
    "LAST_MODIFIED_MODES",
    "RATE_MODELS",
    "STATIC_DATE_AGE",
    "PeriodChanges",
    "World",
    "WorldSpec",
    "build_world",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

RATE_MODELS = ("mixture", "lognormal", "loguniform", "webfountain", "constant")
LAST_MODIFIED_MODES = ("honest", "missing", "now", "random", "static")
#: How long before the start (periods) a ``static`` server's one date lies.
STATIC_DATE_AGE = 30.0
#: WebFountain Table 2 (Brewington & Cybenko): cumulative share at mean lifetimes (days).
_LIFETIME_CDF = (0.0, 0.12, 0.40, 1.0)
_LIFETIME_DAYS = (1.0, 10.0, 100.0, 600.0)
_NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class WorldSpec:
    """The settings of a synthetic world; every field has a default (units in brackets).

    Attributes
    ----------
    pages : pages at the start [pages].
    hosts : hosts [hosts]; sections_per_host : site sections of each host.
    host_skew : Zipf exponent of host sizes (0: equal hosts).
    period_days : length of one period [days].
    rate_model : one of :data:`RATE_MODELS`.
    rate : every page's rate with ``rate_model = "constant"`` [changes/period].
    fast_share, fast_median, fast_sigma, slow_median, slow_sigma : the mixture's share of fast
        pages, medians [changes/day] and log-normal sigmas; ``lognormal`` uses the fast ones.
    rate_low, rate_high : ``loguniform``'s range [changes/day]: ``ln rate`` uniform between
        their logs (the live demo's web; a box no log-normal fits).
    webfountain_version : 1, 2 or 3 (rates of version 3 halved; version 2 puts more pages in
        the fastest and slowest quarters of lifetimes).
    section_sigma : log-normal sigma of a rate factor shared by a section's pages.
    weekday_rhythm, working_hours, burst_probability, burst_factor : see module docstring.
    birth_rate : new pages per period as a share of ``pages``; death_rate : per page per period.
    importance_sigma : log-normal sigma of importance (0: every page 1).
    links_per_page : mean outlinks per page of the link graph (0: no graph).
    host_link_share : share of a page's links that stay on its host.
    last_modified : shares of hosts per Last-Modified behaviour (:data:`LAST_MODIFIED_MODES`).
    polite_hosts : how many of the largest hosts are politeness-bound (0: none).
    polite_cap : crawls per period each politeness-bound host accepts [crawls/period].
    """

    pages: int = 10_000
    hosts: int = 100
    sections_per_host: int = 4
    host_skew: float = 1.0
    period_days: float = 1.0
    rate_model: str = "mixture"
    rate: float = 0.1
    fast_share: float = 0.2
    fast_median: float = 0.5
    fast_sigma: float = 1.0
    slow_median: float = 0.01
    slow_sigma: float = 1.0
    rate_low: float = 0.005
    rate_high: float = 1.0
    webfountain_version: int = 1
    section_sigma: float = 0.5
    weekday_rhythm: float = 0.0
    working_hours: float = 0.0
    burst_probability: float = 0.0
    burst_factor: float = 5.0
    birth_rate: float = 0.0
    death_rate: float = 0.0
    importance_sigma: float = 1.0
    links_per_page: float = 0.0
    host_link_share: float = 0.7
    last_modified: dict[str, float] = field(default_factory=lambda: {"honest": 1.0})
    polite_hosts: int = 0
    polite_cap: int = 1

    def problems(self) -> list[tuple[str, str]]:
        """Impossible values as (key, what to do) pairs; empty when the spec is valid."""
        out: list[tuple[str, str]] = []

        def need(ok: bool, key: str, fix: str) -> None:
            if not ok:
                out.append((key, fix))

        need(self.pages >= 1, "pages", "give at least 1 page")
        need(1 <= self.hosts <= self.pages, "hosts", "give between 1 and `pages` hosts")
        need(self.sections_per_host >= 1, "sections_per_host", "give at least 1")
        need(self.host_skew >= 0, "host_skew", "give a Zipf exponent >= 0")
        need(self.period_days > 0, "period_days", "give a period length > 0 days")
        need(self.rate_model in RATE_MODELS, "rate_model", f"use one of {', '.join(RATE_MODELS)}")
        need(self.rate > 0, "rate", "give a rate > 0 changes per period")
        need(0 <= self.fast_share <= 1, "fast_share", "give a share in [0, 1]")
        for key in ("fast_median", "slow_median"):
            need(getattr(self, key) > 0, key, "give a median rate > 0 changes per day")
        for key in ("fast_sigma", "slow_sigma", "section_sigma", "importance_sigma"):
            need(getattr(self, key) >= 0, key, "give a sigma >= 0")
        need(0 < self.rate_low <= self.rate_high, "rate_low", "give 0 < rate_low <= rate_high")
        need(self.webfountain_version in (1, 2, 3), "webfountain_version", "use 1, 2 or 3")
        need(0 <= self.weekday_rhythm < 1, "weekday_rhythm", "give a value in [0, 1)")
        need(
            self.weekday_rhythm == 0 or self.period_days == 1,
            "weekday_rhythm",
            "weekday rhythms need period_days = 1",
        )
        need(0 <= self.working_hours < 1, "working_hours", "give a share in [0, 1)")
        need(0 <= self.burst_probability <= 1, "burst_probability", "give a probability")
        need(self.burst_factor >= 1, "burst_factor", "give a factor >= 1")
        need(self.birth_rate >= 0, "birth_rate", "give a share >= 0 per period")
        need(self.links_per_page >= 0, "links_per_page", "give a mean >= 0 (0: no link graph)")
        need(0 <= self.host_link_share <= 1, "host_link_share", "give a share in [0, 1]")
        need(0 <= self.death_rate < 1, "death_rate", "give a probability in [0, 1)")
        need(0 <= self.polite_hosts <= self.hosts, "polite_hosts", "give 0 to `hosts` hosts")
        need(self.polite_cap >= 1, "polite_cap", "give at least 1 crawl per period")
        bad = sorted(set(self.last_modified) - set(LAST_MODIFIED_MODES))
        need(not bad, "last_modified", f"use the behaviours {', '.join(LAST_MODIFIED_MODES)}")
        shares = list(self.last_modified.values())
        need(
            bool(shares) and all(s >= 0 for s in shares) and sum(shares) > 0,
            "last_modified",
            "give shares >= 0 that do not all vanish",
        )
        return out

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The field names (the keys of a scenario file's ``[world]`` table)."""
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class PeriodChanges:
    """The changes of every page in one period, split at each page's crawl slot ``c``.

    Segment A is ``[t, t + c)`` and segment B ``[t + c, t + 1)``. Counts are Poisson; first
    and last change times are absolute (periods), NaN where the segment has no change.
    Arrays have shape (n_pages,).
    """

    count_a: IntArray
    first_a: FloatArray
    last_a: FloatArray
    count_b: IntArray
    first_b: FloatArray
    last_b: FloatArray


@dataclass(frozen=True)
class World:
    """A built world: per-page ground truth, shape (n,) for ``n`` pages over the whole run.

    Attributes
    ----------
    spec : WorldSpec
    seed : int
    host, section : host id and global section id of each page.
    rate : mean change rate [changes/period].
    importance : ground-truth importance, mean 1 over the initial pages.
    born, dies : period of birth (0 for initial pages) and of death (never: int64 max).
    slot : the page's crawl time inside a period, in [0, 1) (fixed visiting order).
    host_last_modified : (hosts,) index into :data:`LAST_MODIFIED_MODES`.
    section_weekend : (sections,) bool, sections that follow the weekday rhythm.
    links : the link graph (None without one); importance is then its PageRank.
    """

    spec: WorldSpec
    seed: int
    host: IntArray
    section: IntArray
    rate: FloatArray
    importance: FloatArray
    born: IntArray
    dies: IntArray
    slot: FloatArray
    host_last_modified: IntArray
    section_weekend: BoolArray
    links: LinkGraph | None = None

    @property
    def n_pages(self) -> int:
        """Pages over the whole run (initial and born later)."""
        return int(self.rate.shape[0])

    @property
    def n_sections(self) -> int:
        """Sections of all hosts."""
        return int(self.spec.hosts * self.spec.sections_per_host)

    def alive(self, period: int) -> BoolArray:
        """Pages that exist during ``period``, shape (n,)."""
        return (self.born <= period) & (self.dies > period)

    @property
    def host_cap(self) -> FloatArray:
        """Crawls per period each host accepts (inf: no politeness bound), shape (hosts,).

        Hosts are numbered by Zipf weight, largest first, so the ``polite_hosts`` first are
        the largest.
        """
        cap = np.full(self.spec.hosts, np.inf)
        cap[: self.spec.polite_hosts] = float(self.spec.polite_cap)
        return cap

    def last_modified_mode(self) -> IntArray:
        """Each page's Last-Modified behaviour (index into :data:`LAST_MODIFIED_MODES`)."""
        return self.host_last_modified[self.host]

    def multiplier(self, period: int, rng: np.random.Generator) -> FloatArray:
        """Rate multiplier of every page in ``period`` (rhythm and bursts), shape (n,)."""
        spec = self.spec
        m = np.ones(self.n_sections)
        if spec.weekday_rhythm > 0:
            # Five weekdays at w, two weekend days at (1 - rhythm) w, with a weekly mean of 1.
            w = 7.0 / (5.0 + 2.0 * (1.0 - spec.weekday_rhythm))
            weekend = period % 7 in (5, 6)
            factor = w * (1.0 - spec.weekday_rhythm) if weekend else w
            m = np.where(self.section_weekend, factor, 1.0)
        if spec.burst_probability > 0:
            burst = rng.random(self.n_sections) < spec.burst_probability
            m = m * np.where(burst, spec.burst_factor, 1.0)
        return np.asarray(m[self.section], dtype=np.float64)

    def day_shape(self) -> tuple[FloatArray, FloatArray]:
        """Knots (x, M(x)) of the cumulative share of a period's changes by time of day."""
        x = np.array([0.0, 9 / 24, 17 / 24, 1.0])
        h = self.spec.working_hours
        inside = 8 / 24 + h * (1 - 8 / 24)  # share of changes between 9:00 and 17:00
        outside = 1.0 - inside
        m = np.array([0.0, outside * 9 / 16, outside * 9 / 16 + inside, 1.0])
        return x, m

    def period_changes(self, period: int, seed: int) -> PeriodChanges:
        """Draw the changes of every page in ``period`` (independent of any policy).

        Counts are Poisson with mean ``rate * multiplier`` times the share of the period's
        change intensity in the segment; given a count k >= 1, the first change is the
        minimum of k uniform draws on the segment's intensity scale and the last the maximum,
        mapped back to time through the day shape. Dead or unborn pages get no changes.
        """
        rng = np.random.default_rng([seed, period, 7])
        lam = self.rate
        if self.spec.weekday_rhythm > 0 or self.spec.burst_probability > 0:
            lam = lam * self.multiplier(period, rng)
        lam = np.where(self.alive(period), lam, 0.0)
        x, cum = self.day_shape()
        split = self._split
        out = []
        for lo, hi in ((0.0, split), (split, 1.0)):
            count = rng.poisson(lam * (hi - lo)).astype(np.int64)
            first_t = np.full(count.shape[0], np.nan)
            last_t = np.full(count.shape[0], np.nan)
            # only the pages that changed need times (most pages do not change in a period)
            some = np.flatnonzero(count > 0)
            k = count[some].astype(float)
            low = lo if isinstance(lo, float) else lo[some]
            high = hi if isinstance(hi, float) else hi[some]
            u1 = rng.random(some.size)
            u2 = rng.random(some.size)
            # min of k uniforms: 1 - U^(1/k); max of the remaining k - 1 above it: U^(1/(k-1))
            first = low + (high - low) * (1.0 - u1 ** (1.0 / k))
            rest = np.maximum(k - 1.0, 1.0)
            last = np.where(k >= 2, first + (high - first) * u2 ** (1.0 / rest), first)
            first_t[some] = period + np.interp(first, cum, x)
            last_t[some] = period + np.interp(last, cum, x)
            out.append((count, first_t, last_t))
        (ca, fa, la), (cb, fb, lb) = out
        return PeriodChanges(ca, fa, la, cb, fb, lb)

    @cached_property
    def _split(self) -> FloatArray:
        """Share of a period's change intensity before each page's slot, shape (n,)."""
        x, cum = self.day_shape()
        return np.asarray(np.interp(self.slot, x, cum), dtype=np.float64)


def _base_rates(spec: WorldSpec, n: int, rng: np.random.Generator) -> FloatArray:
    """Page change rates [changes/period] before the section factor, shape (n,)."""
    d = spec.period_days
    if spec.rate_model == "constant":
        return np.full(n, spec.rate)
    if spec.rate_model == "webfountain":
        q = rng.random(n)
        if spec.webfountain_version == 2:
            # 3M pages in each of the fastest and slowest quarters, 1M in the middle half:
            # quantile mass 3/8 + 2/8 + 3/8 mapped back to the lifetime quantiles.
            q = np.interp(q, [0.0, 0.375, 0.625, 1.0], [0.0, 0.25, 0.75, 1.0])
        lifetime = 10.0 ** np.interp(q, _LIFETIME_CDF, np.log10(_LIFETIME_DAYS))
        rate = d / lifetime
        return rate / 2.0 if spec.webfountain_version == 3 else rate
    if spec.rate_model == "loguniform":
        low, high = np.log(spec.rate_low * d), np.log(spec.rate_high * d)
        return np.exp(rng.uniform(low, high, n))
    fast = np.exp(np.log(spec.fast_median * d) + spec.fast_sigma * rng.standard_normal(n))
    if spec.rate_model == "lognormal":
        return fast
    slow = np.exp(np.log(spec.slow_median * d) + spec.slow_sigma * rng.standard_normal(n))
    return np.where(rng.random(n) < spec.fast_share, fast, slow)


def build_world(spec: WorldSpec, seed: int, periods: int) -> World:
    """Build the world of ``spec`` for a run of ``periods`` periods, seeded.

    Raises
    ------
    ValueError
        If the spec has impossible values (see :meth:`WorldSpec.problems`).
    """
    problems = spec.problems()
    if problems:
        key, fix = problems[0]
        raise ValueError(f"{key}: {fix}")
    rng = np.random.default_rng([seed, 1])
    n0 = spec.pages
    births = round(spec.birth_rate * n0)
    born = np.concatenate(
        [np.zeros(n0, np.int64), np.repeat(np.arange(1, periods + 1, dtype=np.int64), births)]
    )
    n = born.shape[0]
    weights = 1.0 / np.arange(1, spec.hosts + 1) ** spec.host_skew
    # every host gets at least one initial page; the rest by Zipf weight
    host0 = np.concatenate(
        [np.arange(spec.hosts), rng.choice(spec.hosts, n0 - spec.hosts, p=weights / weights.sum())]
    )
    host_new = rng.choice(spec.hosts, n - n0, p=weights / weights.sum())
    host = np.concatenate([rng.permutation(host0), host_new]).astype(np.int64)
    sections = spec.hosts * spec.sections_per_host
    section = host * spec.sections_per_host + np.asarray(rng.integers(0, spec.sections_per_host, n))
    section_factor = np.exp(spec.section_sigma * rng.standard_normal(sections))
    rate = _base_rates(spec, n, rng)
    if spec.rate_model != "constant":
        rate = rate * section_factor[section]
    host_imp = np.exp(0.5 * spec.importance_sigma * rng.standard_normal(spec.hosts))
    importance = host_imp[host] * np.exp(0.5 * spec.importance_sigma * rng.standard_normal(n))
    importance = importance / importance[:n0].mean()
    if spec.death_rate > 0:
        life = np.asarray(rng.geometric(spec.death_rate, n), dtype=np.int64)
        dies = np.where(born + life <= periods, born + life, _NEVER)
    else:
        dies = np.full(n, _NEVER, np.int64)
    links = None
    if spec.links_per_page > 0:
        links = _link_graph(spec, host, importance, rng)
        rank = pagerank(links).scores
        importance = rank / rank[:n0].mean()
    modes = list(spec.last_modified)
    shares = np.array([spec.last_modified[m] for m in modes], dtype=float)
    picked = rng.choice(len(modes), spec.hosts, p=shares / shares.sum())
    host_lm = np.array([LAST_MODIFIED_MODES.index(modes[k]) for k in picked], dtype=np.int64)
    return World(
        spec=spec,
        seed=seed,
        host=host,
        section=section.astype(np.int64),
        rate=np.asarray(rate, dtype=np.float64),
        importance=np.asarray(importance, dtype=np.float64),
        born=born,
        dies=dies.astype(np.int64),
        slot=np.asarray(rng.random(n), dtype=np.float64),
        host_last_modified=host_lm,
        section_weekend=rng.random(sections) < 0.8,
        links=links,
    )


def _link_graph(
    spec: WorldSpec, host: IntArray, weight: FloatArray, rng: np.random.Generator
) -> LinkGraph:
    """Links of every page: Poisson(links_per_page) outlinks, ``host_link_share`` to uniform
    pages of the same host, the rest to pages drawn in proportion to ``weight``."""
    n = host.shape[0]
    degree = rng.poisson(spec.links_per_page, n)
    src = np.repeat(np.arange(n, dtype=np.int64), degree)
    local = rng.random(src.size) < spec.host_link_share
    # same host: a uniform page of the source's host (pages sorted by host)
    order = np.argsort(host, kind="stable")
    start = np.searchsorted(host[order], np.arange(spec.hosts))
    size = np.bincount(host, minlength=spec.hosts)
    h = host[src]
    pick = start[h] + (rng.random(src.size) * size[h]).astype(np.int64)
    same_host = order[np.minimum(pick, n - 1)]
    cumulative = np.cumsum(weight / weight.sum())
    far = np.minimum(np.searchsorted(cumulative, rng.random(src.size)), n - 1)
    dst = np.where(local, same_host, far)
    return LinkGraph.from_edges(src, dst, n_pages=n)

"""Default settings of the estimators, in one place so that tests and callers import them.

Units: rates are changes per day, times and durations are days.
"""

from __future__ import annotations

import math

__all__ = [
    "CLOCK_TOLERANCE_DAYS",
    "CONFIDENCE",
    "LAST_MODIFIED_RATE_CONFIDENCE",
    "LOG_RATE_MAX",
    "LOG_RATE_MIN",
    "MAX_HOST_VIOLATION_SHARE",
    "MAX_PAGE_VIOLATION_SHARE",
    "MAX_RATE",
    "MIN_CHANGES",
    "MIN_HOST_CHECKS",
    "MIN_LAST_MODIFIED_CHANGES",
    "MIN_RATE",
    "MIN_SATURATED_SHARE",
    "MIN_UNCHANGED",
    "MIN_VERIFYING_CHANGES",
    "N_BUCKETS",
    "PRIOR_MAX_PAGES",
    "PRIOR_MIN_INTERVAL_PAGES",
    "PRIOR_UNIDENTIFIED_SIGMA",
    "SATURATED_SHARE",
    "SMOOTHING_WEIGHT",
    "SOLVER_MAX_ITER",
    "SOLVER_TOL",
]

#: Weight of a new measurement against the previous plan's value when the nightly run smooths
#: the discovery rates and the measured capacity (:func:`estimators.discovery.smoothed`): each
#: cycle moves half way from the previous value to the new measurement. For measurements
#: with independent noise of deviation s, consecutive smoothed values differ by
#: s * w * sqrt(2 / (2 - w)) = 0.58 s in deviation (raw ones by 1.41 s), and a step change is
#: followed to within 1 / 2**k of its size after k cycles (6 % after 4).
SMOOTHING_WEIGHT = 0.5

#: A plan period kept the crawler busy to its end (its fetches measure the crawl capacity)
#: when the released work still waiting at its end is more than this share of the work it
#: was offered (its release plus the pages carried into it); below it, the period kept up and
#: its fetches are only a lower bound (:mod:`estimators.capacity`). Not 0: pages released for
#: the period's last moments, and a host's last pages behind its politeness delay, are still
#: waiting when a crawler that kept up reaches the period's end.
SATURATED_SHARE = 0.1
#: Saturated periods measure the crawl capacity only when they are at least this share of the
#: ended periods read (:func:`estimators.capacity.crawl_capacity`): a lone one among periods
#: that kept up is a crawler that started late or paused, not its capacity.
MIN_SATURATED_SHARE = 0.25

#: Coverage of every confidence or credible interval.
CONFIDENCE = 0.95

#: Number of change-rate buckets (1..255); bucket 0 means "no estimate yet" (one byte per page).
N_BUCKETS = 255
#: Lower edge of bucket 1 and upper edge of bucket 255, changes per day: once in about three
#: years to about once a second, eight decades (about 32 buckets a decade, each 7.5 % wide),
#: so that any web fits without a setting, compressed-time test webs whose pages change in
#: seconds included. Slower or faster rates saturate into the end buckets, which costs little
#: there: a bucket's aggregates use its pages' own rates, and below the range a page is
#: almost never changed at the next crawl, above it almost always changed (no crawler may
#: revisit a page faster than the politeness delay, 1 s by default).
MIN_RATE = 1e-3
MAX_RATE = 1e5

#: Range of the natural log of the rate (per day) that the solvers search: 1e-12 to 1e12 per
#: day, far outside any rate a crawl can resolve, so that it never binds on real evidence.
LOG_RATE_MIN = math.log(1e-12)
LOG_RATE_MAX = math.log(1e12)
#: Newton's method on the log rate stops once a Newton step is below this (a relative change
#: of rate); the step is taken, and Newton's quadratic convergence leaves an error of about its
#: square (1e-12 here), as the tests against scipy's brentq check.
SOLVER_TOL = 1e-6
SOLVER_MAX_ITER = 100

#: A page needs at least this many change intervals and this many no-change intervals before
#: its plain maximum-likelihood estimate is used; with less evidence it is shrunk toward the
#: population prior.
MIN_CHANGES = 3
MIN_UNCHANGED = 3
#: Changes seen through Last-Modified before Cho & Garcia-Molina's bias-corrected estimator is
#: used unshrunk (with one change it returns 0).
MIN_LAST_MODIFIED_CHANGES = 2

#: Pages sampled to fit the population prior: two parameters need far fewer.
PRIOR_MAX_PAGES = 5000
#: Pages with a change/no-change interval from which on the prior is fitted to the intervals
#: alone; below it, pages fetched once join the fit through a reliable Last-Modified.
PRIOR_MIN_INTERVAL_PAGES = 100
#: The population prior's sigma (natural-log units) while the pages' evidence cannot fit it:
#: fewer than PRIOR_MIN_INTERVAL_PAGES pages with two or more intervals or a date (one
#: interval says only changed or not, so one interval a page, all about as long as a round
#: robin makes them, fits only the share of pages that changed, on a ridge of (mu, sigma)
#: along which the fit slid to the lowest sigma allowed, 0.25, and shrank every page onto
#: one rate). A spread of rates over two and a half decades (ln 10^2.5 / sqrt 12 for
#: log-uniform rates; Cho & Garcia-Molina saw pages from daily to monthly and slower): in
#: the simulator, 1 to 2 planned within 0.001 of freshness of each other on the demo's web
#: and on fast pages with lying dates, 3 lost 0.003, 0.25 lost 0.003-0.004.
PRIOR_UNIDENTIFIED_SIGMA = 1.5

#: Last-Modified within this of the fetch time counts as "the fetch time" (a server stamping
#: responses with now); later than the fetch by more than this is "in the future". One minute
#: of clock skew between crawler and server is tolerated.
CLOCK_TOLERANCE_DAYS = 60.0 / 86400.0
#: Largest share of a page's fetches with Last-Modified that may fail a consistency check
#: before the page's Last-Modified is judged unreliable.
MAX_PAGE_VIOLATION_SHARE = 0.1
#: The same for all pages of a host, once the host has at least MIN_HOST_CHECKS such fetches.
MAX_HOST_VIOLATION_SHARE = 0.2
MIN_HOST_CHECKS = 10
#: Content changes a host's dates must have caught (moved with, between two dated fetches of
#: one page) before a date is believed beyond what the crawler saw: a page's single fetch, or
#: its first fetch's age. A server that sends one fixed date for pages that change looks, on
#: one fetch per page, exactly like a site unchanged since that date.
MIN_VERIFYING_CHANGES = 3
#: Level of the rate-consistency test of a page's Last-Modified: its rate C / T must lie where
#: the page's change/no-change log-likelihood is within chi2_1(0.999) / 2 = 5.41 of its
#: maximum. Strict, because the two estimates of one honest page share their evidence.
LAST_MODIFIED_RATE_CONFIDENCE = 0.999

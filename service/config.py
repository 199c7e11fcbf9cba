"""Configuration: command-line options, then environment, then ``crawlplan.toml``, then defaults.

Every setting is declared once in :data:`SETTINGS` with its TOML key, environment variable,
type, unit, bounds and default; ``crawlplan config`` prints the resolved values and where each
came from. The configuration file is ``--config FILE``, else ``$CRAWLPLAN_CONFIG``, else
``./crawlplan.toml`` when it exists. Example::

    [store]
    db = "postgresql://postgres@127.0.0.1:5432/crawlplan"

    [lease]
    seconds = 60           # a dead worker's hosts return this long after its last heartbeat
    max_urls = 100         # largest batch one lease call hands out
    max_urls_per_host = 20
    max_hosts = 20
    revisit_after_days = 1.0
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.politeness import PolitenessPolicy
from service.errors import ConfigError
from store.database import DEFAULT_DB_URL
from store.leases import LeasePolicy

if TYPE_CHECKING:
    from crawler.worker import CrawlSettings
    from estimators.buckets import BucketScale
    from estimators.reliability import LastModifiedPolicy

__all__ = ["SETTINGS", "Setting", "Settings", "load_settings"]

DEFAULT_CONFIG_FILE = Path("crawlplan.toml")


@dataclass(frozen=True)
class Setting:
    """One configuration value: ``key`` is ``section.name`` in crawlplan.toml."""

    key: str
    env: str
    #: int, float, str, or tuple: a list of URL glob patterns (``crawl.include``, ``exclude``).
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    #: The largest value a number setting may take (None: no bound).
    maximum: float | None = None
    #: The values a string setting may take (None: any).
    choices: tuple[str, ...] | None = None

    def parse(self, raw: Any, origin: str) -> Any:
        """Convert ``raw`` (a TOML value or an environment string) or raise ConfigError."""
        if self.kind is tuple:
            return self._patterns(raw, origin)
        value: Any = raw
        try:
            if self.kind is int:
                if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                    raise ValueError
                value = int(raw)
            elif self.kind is float:
                if isinstance(raw, bool):
                    raise ValueError
                value = float(raw)
            elif not isinstance(raw, str):
                raise ValueError
        except (TypeError, ValueError):
            raise ConfigError(
                f"{origin}: {self.key} must be {self.kind.__name__}, got {raw!r}"
            ) from None
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{origin}: {self.key} must be >= {self.minimum}, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{origin}: {self.key} must be <= {self.maximum:,}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(self.choices)
            raise ConfigError(f"{origin}: {self.key} must be one of {allowed}, got {value!r}")
        return value

    def _patterns(self, raw: Any, origin: str) -> tuple[str, ...]:
        """A list of URL glob patterns: a TOML array of strings, or one string of
        comma-separated patterns (the environment's form; a pattern with a comma in it needs
        the TOML array). Every pattern is a non-empty string, blanks around it dropped."""
        name = self.key.split(".")[-1]
        globs = (
            ["https://example.org/docs/*"] if name == "include" else ["*/private/*", "*/print/*"]
        )
        if origin.startswith("$"):
            example = f"{self.env}='{','.join(globs)}'"
        else:
            example = f"{name} = {globs} in [{self.key.split('.')[0]}]".replace("'", '"')
        if isinstance(raw, str):
            items: list[Any] = raw.split(",")
        elif isinstance(raw, list | tuple):
            items = list(raw)
        else:
            raise ConfigError(
                f"{origin}: {self.key} must be a list of URL glob patterns, e.g. {example}; "
                f"got {raw!r}"
            )
        for item in items:
            if not isinstance(item, str):
                raise ConfigError(
                    f"{origin}: {self.key} pattern {item!r} is not a string: quote it, "
                    f"e.g. {example}"
                )
            if not item.strip():
                raise ConfigError(
                    f"{origin}: {self.key} has an empty pattern in {raw!r}: remove it, or "
                    f"write a glob the whole URL must match, e.g. {example}"
                )
        return tuple(item.strip() for item in items)


#: Defaults whose owners live in heavy modules (the crawler's worker pool, the estimators, the
#: planner), written here as values so that reading the configuration does not import numpy,
#: scipy or Pyomo; tests/test_config.py checks that they equal their owners' defaults.
DEFAULT_MAX_BYTES = 1_000_000  # crawler.fetch.FetchLimits().max_bytes
DEFAULT_USER_AGENT = "crawlplan/0.1 (+https://example.invalid/crawlplan)"  # CrawlSettings()
DEFAULT_CRAWL_SCOPE = "domains"  # crawler.scope.CrawlScope().mode
DEFAULT_ROBOTS_GIVE_UP_AFTER = 3  # crawler.worker.CrawlSettings().robots_give_up_after
DEFAULT_NOISE_TWINS = 3  # crawler.noise.NOISE_TWINS
DEFAULT_MIN_RATE = 1e-3  # estimators.defaults.MIN_RATE, changes per day
DEFAULT_MAX_RATE = 1e5  # estimators.defaults.MAX_RATE, changes per day
DEFAULT_CLOCK_TOLERANCE_SECONDS = 60.0  # estimators.defaults.CLOCK_TOLERANCE_DAYS * 86,400
DEFAULT_EXPLORE_REVISITS = 8.0  # planner.cycle.plan_inputs.EXPLORE_REVISITS
DEFAULT_PROBE_HORIZON = 180.0  # estimators.bayes_action.PROBE_HORIZON_PERIODS
DEFAULT_PAGE_LIFETIME_DAYS = 200.0  # planner.cycle.plan_cycle.PAGE_LIFETIME_DAYS
#: The most periods a cycle or a horizon may have: planner.model.instance.MAX_MODEL_CELLS
#: over one bucket. The model's B x T cells are checked again when it is built; this bound
#: keeps what is per period alone (a cold start's new-page quotas, the plan's period rows)
#: from a typo's size: ``periods = 100000000`` took 15 GB and two minutes to refuse.
MAX_PLAN_PERIODS = 100_000

_defaults = LeasePolicy()
_polite = PolitenessPolicy()
SETTINGS: tuple[Setting, ...] = (
    Setting("store.db", "CRAWLPLAN_DB_URL", str, DEFAULT_DB_URL, "database URL"),
    Setting(
        "lease.seconds",
        "CRAWLPLAN_LEASE_SECONDS",
        float,
        _defaults.lease_seconds,
        "seconds a worker may hold a host",
        minimum=1,
    ),
    Setting(
        "lease.max_urls",
        "CRAWLPLAN_LEASE_MAX_URLS",
        int,
        _defaults.max_urls,
        "most URLs per lease call",
        minimum=1,
    ),
    Setting(
        "lease.max_urls_per_host",
        "CRAWLPLAN_LEASE_MAX_URLS_PER_HOST",
        int,
        _defaults.max_urls_per_host,
        "most URLs of one host per lease",
        minimum=1,
    ),
    Setting(
        "lease.max_hosts",
        "CRAWLPLAN_LEASE_MAX_HOSTS",
        int,
        _defaults.max_hosts,
        "most hosts per lease call",
        minimum=1,
    ),
    Setting(
        "lease.revisit_after_days",
        "CRAWLPLAN_REVISIT_AFTER_DAYS",
        float,
        _defaults.revisit_after / timedelta(days=1),
        "days until a page is due again when no plan scheduled it",
        minimum=0,
    ),
    Setting("crawl.workers", "CRAWLPLAN_WORKERS", int, 4, "crawler worker threads", minimum=1),
    Setting(
        "crawl.processes",
        "CRAWLPLAN_PROCESSES",
        int,
        1,
        "crawler processes, each with crawl.workers threads (one core each at most)",
        minimum=1,
    ),
    Setting(
        "crawl.min_delay",
        "CRAWLPLAN_MIN_DELAY",
        float,
        _polite.min_delay,
        "least seconds between two requests to one host",
        minimum=0,
    ),
    Setting(
        "crawl.max_delay",
        "CRAWLPLAN_MAX_DELAY",
        float,
        _polite.max_delay,
        "most seconds between requests; a longer robots.txt Crawl-delay is clamped",
        minimum=0,
    ),
    Setting(
        "crawl.max_per_host",
        "CRAWLPLAN_MAX_PER_HOST",
        int,
        _polite.max_per_host,
        "requests to one host in flight at once, each waiting crawl.min_delay after its "
        "own (1: one at a time)",
        minimum=1,
    ),
    Setting(
        "crawl.max_bytes",
        "CRAWLPLAN_MAX_BYTES",
        int,
        DEFAULT_MAX_BYTES,
        "size cap of one page (bytes); the rest is not downloaded",
        minimum=1,
    ),
    Setting(
        "crawl.user_agent",
        "CRAWLPLAN_USER_AGENT",
        str,
        DEFAULT_USER_AGENT,
        "User-Agent header; its first word is the robots.txt token",
    ),
    Setting(
        "crawl.scope",
        "CRAWLPLAN_CRAWL_SCOPE",
        str,
        DEFAULT_CRAWL_SCOPE,
        "links followed: hosts (same host), domains (same registered domain), any",
        choices=("hosts", "domains", "any"),
    ),
    Setting(
        "crawl.noise_twins",
        "CRAWLPLAN_NOISE_TWINS",
        int,
        DEFAULT_NOISE_TWINS,
        "extra fetches of one page per host every 30 days that learn the site's per-request "
        "noise (teasers, greetings): elements whose text differs are left out of change "
        "detection; 0: none",
        minimum=0,
        maximum=10,
    ),
    Setting(
        "crawl.robots_give_up_after",
        "CRAWLPLAN_ROBOTS_GIVE_UP_AFTER",
        int,
        DEFAULT_ROBOTS_GIVE_UP_AFTER,
        "give a host up after this many unreachable robots.txt fetches in a row (30 minutes "
        "apart): its pages are not crawled until a URL of it is seeded again; 0: never",
        minimum=0,
    ),
    Setting(
        "crawl.include",
        "CRAWLPLAN_INCLUDE",
        tuple,
        (),
        "URL glob patterns (whole URL, case-sensitive); a link in crawl.scope is followed "
        "only if it matches one; none: every link. Comma-separated in the environment",
    ),
    Setting(
        "crawl.exclude",
        "CRAWLPLAN_EXCLUDE",
        tuple,
        (),
        "URL glob patterns of links never followed (e.g. */private/*, */print/*), even if "
        "crawl.include matches. Comma-separated in the environment",
    ),
    Setting(
        "api.tokens",
        "CRAWLPLAN_API_TOKENS",
        str,
        "",
        "worker API bearer tokens, comma-separated, 16+ characters each",
    ),
    Setting("api.host", "CRAWLPLAN_API_HOST", str, "127.0.0.1", "address `serve` listens on"),
    Setting("api.port", "CRAWLPLAN_API_PORT", int, 8470, "port `serve` listens on", minimum=1),
    Setting(
        "api.max_body_bytes",
        "CRAWLPLAN_API_MAX_BODY_BYTES",
        int,
        8 * 1024 * 1024,
        "largest request body the worker API reads",
        minimum=1024,
    ),
    Setting(
        "api.max_connections",
        "CRAWLPLAN_API_MAX_CONNECTIONS",
        int,
        64,
        "concurrent connections `serve` accepts; more get 503",
        minimum=1,
    ),
    Setting(
        "estimate.min_rate",
        "CRAWLPLAN_MIN_RATE",
        float,
        DEFAULT_MIN_RATE,
        "lowest change rate of the 255 buckets, changes per day",
        minimum=1e-12,
    ),
    Setting(
        "estimate.max_rate",
        "CRAWLPLAN_MAX_RATE",
        float,
        DEFAULT_MAX_RATE,
        "highest change rate of the 255 buckets, changes per day",
        minimum=1e-12,
    ),
    Setting(
        "estimate.clock_tolerance",
        "CRAWLPLAN_CLOCK_TOLERANCE",
        float,
        DEFAULT_CLOCK_TOLERANCE_SECONDS,
        "seconds within which a Last-Modified counts as the fetch time (a server stamping "
        "the response time) or as unmoved; HTTP dates have whole seconds",
        minimum=0,
    ),
    Setting(
        "estimate.min_change",
        "CRAWLPLAN_MIN_CHANGE",
        float,
        0.0,
        "share of a page's main text (0-1) a change must reach to count as one; smaller "
        "changes count as none, and Last-Modified dates are then not read (0: any change)",
        minimum=0,
        maximum=1,
    ),
    Setting(
        "plan.period_days",
        "CRAWLPLAN_PERIOD_DAYS",
        float,
        1.0,
        "days per plan period",
        minimum=1e-6,
    ),
    Setting(
        "plan.periods",
        "CRAWLPLAN_PERIODS",
        int,
        14,
        "periods per plan cycle (T)",
        minimum=1,
        maximum=MAX_PLAN_PERIODS,
    ),
    Setting(
        "plan.horizon",
        "CRAWLPLAN_HORIZON",
        int,
        0,
        "periods the model looks ahead (the plan publishes the first T); 0: T",
        minimum=0,
        maximum=MAX_PLAN_PERIODS,
    ),
    Setting(
        "plan.strategy",
        "CRAWLPLAN_STRATEGY",
        int,
        1,
        "objective weighting of plan.model = webfountain: the paper's strategy 1, 2 or 3",
        minimum=1,
    ),
    Setting(
        "plan.capacity",
        "CRAWLPLAN_CAPACITY",
        float,
        0.0,
        "crawls per period the plan may use; 0: the throughput measured over the window",
        minimum=0,
    ),
    Setting(
        "plan.window_days",
        "CRAWLPLAN_WINDOW_DAYS",
        float,
        7.0,
        "days of crawl history measured for capacity, costs and discovery",
        minimum=1e-6,
    ),
    Setting(
        "plan.model",
        "CRAWLPLAN_MODEL",
        str,
        "steady",
        "bucket model: steady (the steady-rate model) or webfountain (the paper's, with "
        "plan.strategy)",
        choices=("steady", "webfountain"),
    ),
    Setting(
        "plan.objective",
        "CRAWLPLAN_OBJECTIVE",
        str,
        "freshness",
        "what the plan and the page schedule inside each bucket's quota optimize: freshness, "
        "obsolescence, harmonic, binary",
    ),
    Setting(
        "plan.page_lifetime_days",
        "CRAWLPLAN_PAGE_LIFETIME_DAYS",
        float,
        DEFAULT_PAGE_LIFETIME_DAYS,
        "days a web page lives on average: what a crawled new page is worth beyond the cycle",
        minimum=0,
    ),
    Setting(
        "plan.explore",
        "CRAWLPLAN_EXPLORE",
        float,
        DEFAULT_EXPLORE_REVISITS,
        "every change-rate bucket's pages crawled at least once per this many mean revisit "
        "intervals (known pages / capacity periods), so that misjudged pages get re-measured; "
        "0: off",
        minimum=0,
    ),
    Setting(
        "plan.probe_horizon",
        "CRAWLPLAN_PROBE_HORIZON",
        float,
        DEFAULT_PROBE_HORIZON,
        "periods over which learning a page's change rate is counted: a page whose rate is "
        "worth learning over them gets a probe (two crawls a short delay apart, charged to the "
        "plan) or a follow-up; 0: neither",
        minimum=0,
    ),
    Setting(
        "plan.follow_ups",
        "CRAWLPLAN_FOLLOW_UPS",
        str,
        "off",
        "on: a page whose rate is worth one crawl to learn, not two, gets a follow-up (one "
        "more crawl a short delay after its next planned one, charged to the plan), which "
        "pays back over months, not weeks; off: only probes",
        choices=("on", "off"),
    ),
    Setting(
        "plan.weights",
        "CRAWLPLAN_WEIGHTS",
        str,
        "equal",
        "what a bucket's crawls are worth: equal (every page alike) or importance (weighted "
        "by its pages' mean OPIC importance, as the page schedule weights each page)",
        choices=("equal", "importance"),
    ),
    Setting(
        "plan.rates",
        "CRAWLPLAN_PLAN_RATES",
        str,
        "bayes",
        "what the plan takes a page's rate to be: bayes (the rate at which a known page would "
        "be crawled as the Bayes action crawls this one, under its whole posterior) or "
        "estimates (its point estimate, as if true)",
        choices=("bayes", "estimates"),
    ),
    Setting(
        "plan.renewal",
        "CRAWLPLAN_RENEWAL",
        str,
        "measured",
        "plan for a growing web: measured (the new pages the cycle expects, over the pages "
        "held, are crawled at once, so a bucket's crawls go to its older pages); off: plan as "
        "if every page had been crawled long ago",
        choices=("measured", "off"),
    ),
    Setting(
        "plan.crawl_cost",
        "CRAWLPLAN_CRAWL_COST",
        str,
        "measured",
        "cost of a crawl in the model: measured (each bucket's mean fetch time: the capacity is "
        "crawl time) or equal (every crawl alike: the capacity is a number of crawls)",
    ),
)
_BY_KEY = {s.key: s for s in SETTINGS}


@dataclass(frozen=True)
class Settings:
    """Resolved configuration; ``origins`` says where each value came from."""

    values: Mapping[str, Any]
    origins: Mapping[str, str]

    @property
    def db_url(self) -> str:
        """The database URL."""
        return str(self.values["store.db"])

    @property
    def lease_policy(self) -> LeasePolicy:
        """The lease queue's policy."""
        return LeasePolicy(
            lease_seconds=self.values["lease.seconds"],
            max_urls=self.values["lease.max_urls"],
            max_urls_per_host=self.values["lease.max_urls_per_host"],
            max_hosts=self.values["lease.max_hosts"],
            revisit_after=timedelta(days=self.values["lease.revisit_after_days"]),
        )

    @property
    def bucket_scale(self) -> BucketScale:
        """The 255 change-rate buckets' range (``estimate.min_rate`` .. ``max_rate``)."""
        from estimators.buckets import BucketScale

        try:
            return BucketScale(
                float(self.values["estimate.min_rate"]), float(self.values["estimate.max_rate"])
            )
        except ValueError as error:
            raise ConfigError(f"estimate.min_rate and estimate.max_rate: {error}") from None

    @property
    def last_modified_policy(self) -> LastModifiedPolicy:
        """The Last-Modified reliability test's thresholds (``estimate.clock_tolerance``)."""
        from estimators.reliability import LastModifiedPolicy

        return LastModifiedPolicy(
            clock_tolerance=float(self.values["estimate.clock_tolerance"]) / 86_400.0
        )

    @property
    def api_tokens(self) -> tuple[str, ...]:
        """The worker API's accepted tokens (``api.tokens``, comma-separated)."""
        raw = str(self.values["api.tokens"])
        return tuple(t.strip() for t in raw.split(",") if t.strip())

    def crawl_settings(self, *, allow_private: bool = False) -> CrawlSettings:
        """The crawler's settings; ``allow_private`` lets it contact loopback (demo, tests)."""
        from crawler.fetch import FetchLimits
        from crawler.scope import CrawlScope
        from crawler.worker import CrawlSettings

        agent = str(self.values["crawl.user_agent"])
        return CrawlSettings(
            agent=agent.split("/")[0].split()[0].lower(),
            user_agent=agent,
            politeness=PolitenessPolicy(
                min_delay=self.values["crawl.min_delay"],
                max_delay=max(self.values["crawl.max_delay"], self.values["crawl.min_delay"]),
                max_per_host=int(self.values["crawl.max_per_host"]),
            ),
            limits=FetchLimits(
                max_bytes=self.values["crawl.max_bytes"], allow_private=allow_private
            ),
            scope=CrawlScope(
                str(self.values["crawl.scope"]),
                include=tuple(self.values["crawl.include"]),
                exclude=tuple(self.values["crawl.exclude"]),
            ),
            robots_give_up_after=int(self.values["crawl.robots_give_up_after"]),
            noise_twins=int(self.values["crawl.noise_twins"]),
        )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {path}: {error.strerror}") from None
    flat: dict[str, Any] = {}
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {section!r} must be a [section], e.g. [store]")
        for name, value in table.items():
            key = f"{section}.{name}"
            if key not in _BY_KEY:
                known = ", ".join(sorted(_BY_KEY))
                raise ConfigError(f"{path}: unknown setting {key!r}; known settings: {known}")
            flat[key] = value
    return flat


def load_settings(
    options: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every setting: ``options`` (non-None values) > environment > file > default.

    ``config_file`` None means ``$CRAWLPLAN_CONFIG`` or ``./crawlplan.toml`` if present.
    """
    env = os.environ if environ is None else environ
    options = {k: v for k, v in (options or {}).items() if v is not None}
    unknown = set(options) - set(_BY_KEY)
    if unknown:
        raise ConfigError(f"unknown settings {sorted(unknown)}")
    if config_file is None and env.get("CRAWLPLAN_CONFIG"):
        config_file = Path(env["CRAWLPLAN_CONFIG"])
    if config_file is None and DEFAULT_CONFIG_FILE.exists():
        config_file = DEFAULT_CONFIG_FILE
    from_file = _read_toml(config_file) if config_file is not None else {}
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    sources: list[tuple[str, Callable[[Setting], Any]]] = [
        ("option", lambda s: options.get(s.key)),
        ("environment", lambda s: env.get(s.env) or None),
        (str(config_file), lambda s: from_file.get(s.key)),
    ]
    for setting in SETTINGS:
        for origin, lookup in sources:
            raw = lookup(setting)
            if raw is not None:
                where = f"${setting.env}" if origin == "environment" else origin
                values[setting.key] = setting.parse(raw, where)
                origins[setting.key] = where
                break
        else:
            values[setting.key] = setting.default
            origins[setting.key] = "default"
    return Settings(values=values, origins=origins)

"""Scenario files (TOML): read, validate, and find the shipped ones.

A scenario file says what to simulate and what to compare::

    name = "planner-vs-peers"             # used in output names
    title = "The planner against the peers' policies"
    description = "..."                   # optional, one paragraph for the report
    periods = 56                          # measured periods (>= 1)
    warmup = 28                           # periods run first, not in the key table (>= 0)
    budget_share = 0.1428                 # crawls per period as a share of the initial pages,
    # budget = 2857                       # ... or as a number of crawls (give one of the two)
    cycle = 7                             # periods per cycle, for "crawls per cycle" (>= 1)
    seeds = [1, 2]                        # one run per seed (world and changes)
    warm_start = true                     # pages fetched once before the run, else cold start
    importance = "true"                   # or "opic": estimated by OPIC on the world's links
    budget_profile = [1.5, 1.5, 1, 1, 1, 0.5, 0.5]   # optional: budget multipliers by period,
                                          # repeating, mean 1 (capacity that varies)
    metrics = ["freshness", "obsolescence", "obsolete_pages"]   # columns of the key table

    [world]                               # scenarios.world.WorldSpec fields
    pages = 20000
    rate_model = "mixture"

    [[policies]]                          # one entry per policy; scenarios.policies.make_policy
    kind = "webfountain"
    name = "planner (strategy 3)"
    strategy = 3
    rates = "estimated"                   # "true": the oracle variant

    [[variants]]                          # optional: runs of every policy with changes
    name = "budget 1/14"
    budget_share = 0.0714
    world = { rate_model = "lognormal" }

Every violation raises :class:`ScenarioError` with one line naming the file, the line, the
key, and the fix.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scenarios.policies.base import PolicyError
from scenarios.policies.registry import POLICY_KINDS, make_policy
from scenarios.simulator import METRICS, budget_profile_problem
from scenarios.world import WorldSpec

__all__ = [
    "SHIPPED_DIR",
    "Scenario",
    "ScenarioError",
    "Variant",
    "load_scenario",
    "parse_scenario",
    "shipped_scenarios",
]

#: Where the shipped scenario files live.
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"

_TOP_KEYS = {
    "name": str,
    "title": str,
    "description": str,
    "periods": int,
    "warmup": int,
    "budget": int,
    "budget_share": float,
    "cycle": int,
    "seeds": list,
    "warm_start": bool,
    "importance": str,
    "metrics": list,
    "budget_profile": list,
    "world": dict,
    "policies": list,
    "variants": list,
}
_VARIANT_KEYS = {"name": str, "budget": int, "budget_share": float, "world": dict, "periods": int}
_POLICY_TYPES: dict[str, type] = {
    "kind": str,
    "name": str,
    "rates": str,
    "refit_every": int,
    "last_modified": str,
    "max_interval": float,
    "importance": bool,
    "model": str,
    "objective": str,
    "strategy": int,
    "buckets": int,
    "cycle": int,
    "cold_start": str,
    "within_bucket": str,
    "release_order": str,
    "bucket_range": str,
    "horizon": int,
    "terminal_value": bool,
    "explore": float,
    "probe_horizon": float,
    "follow_ups": bool,
    "group": str,
    "sample_share": float,
}
_WORLD_TYPES: dict[str, type] = {
    name: type(value) for name, value in WorldSpec().__dict__.items() if name != "last_modified"
}
_WORLD_TYPES["last_modified"] = dict


class ScenarioError(ValueError):
    """A scenario file that cannot be run; ``str(err)`` is one line: where, what, the fix."""


@dataclass(frozen=True)
class Variant:
    """One set of changes to the scenario's base settings (name "" for the base itself)."""

    name: str
    world: WorldSpec
    periods: int
    budget: int


@dataclass(frozen=True)
class Scenario:
    """A validated scenario.

    Attributes
    ----------
    name, title, description : labels.
    periods, warmup, cycle : periods measured, run before, per cycle.
    seeds : one run per seed.
    warm_start : the crawler starts with every initial page fetched once.
    importance : ``"true"`` or ``"opic"`` (see :class:`scenarios.simulator.SimulationSettings`).
    metrics : columns of the key table (from :data:`scenarios.simulator.METRICS`).
    policies : the policy entries (validated by building each once).
    variants : at least one (the base settings when the file has none).
    source : the file read (None for a mapping).
    budget_profile : budget multipliers by period, repeating, mean 1 (empty: constant budget;
        :class:`scenarios.simulator.SimulationSettings`).
    """

    name: str
    title: str
    description: str
    periods: int
    warmup: int
    cycle: int
    seeds: tuple[int, ...]
    warm_start: bool
    importance: str
    metrics: tuple[str, ...]
    policies: tuple[dict[str, Any], ...]
    variants: tuple[Variant, ...]
    source: Path | None = None
    quick: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    budget_profile: tuple[float, ...] = ()

    def quick_version(self, max_pages: int = 4000) -> Scenario:
        """A small version for a first look and for tests: at most ``max_pages`` pages (the
        budget scaled alike) and the first seed only."""
        variants = []
        for v in self.variants:
            scale = min(1.0, max_pages / v.world.pages)
            pages = max(1, int(v.world.pages * scale))
            hosts = max(1, min(v.world.hosts, pages // 20 or 1))
            polite = min(v.world.polite_hosts, hosts)
            world = replace(v.world, pages=pages, hosts=hosts, polite_hosts=polite)
            variants.append(replace(v, world=world, budget=max(1, round(v.budget * scale))))
        return replace(self, variants=tuple(variants), seeds=self.seeds[:1], quick=True)


def _line_of(text: str, key: str, after: int = 0) -> int:
    """1-based line of the first assignment of ``key``: in the table that starts at line
    ``after`` when given (up to the next table header), else anywhere (0: not found)."""
    pattern = re.compile(rf"^\s*(\[\[?\s*)?{re.escape(key)}\s*(=|\]|\.)")
    inline = re.compile(rf"[{{,]\s*{re.escape(key)}\s*=")
    lines = text.splitlines()
    start = max(after, 1)
    for number, line in enumerate(lines[start - 1 :], start=start):
        if after and number > after and line.lstrip().startswith("["):
            break
        if pattern.search(line) or inline.search(line):
            return number
    return 0


def _table_line(text: str, table: str, index: int) -> int:
    """Line of the ``index``-th ``[[table]]`` header (0 when not found)."""
    seen = -1
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]", line):
            seen += 1
            if seen == index:
                return number
    return 0


class _Reader:
    """Validation with file and line in every message."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source

    def fail(self, key: str, message: str, after: int = 0) -> ScenarioError:
        leaf = key.split(".")[-1]
        line = _line_of(self.text, leaf, after) or after
        where = f"{self.source} line {line}" if line else self.source
        return ScenarioError(f"{where}: {key}: {message}")

    def typed(self, key: str, value: Any, kind: type, after: int = 0) -> Any:
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if kind is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        if kind is not bool and isinstance(value, bool):
            raise self.fail(key, f"expected {_type_name(kind)}, got {value!r}", after)
        if not isinstance(value, kind):
            raise self.fail(key, f"expected {_type_name(kind)}, got {value!r}", after)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(key, "expected a finite number", after)
        return value

    def unknown(
        self, table: Mapping[str, Any], allowed: Mapping[str, type], prefix: str, after: int = 0
    ) -> None:
        for key in table:
            if key not in allowed:
                close = _closest(key, list(allowed))
                hint = f"; did you mean {close!r}?" if close else ""
                raise self.fail(
                    f"{prefix}{key}",
                    f"unknown key{hint} (keys: {', '.join(sorted(allowed))})",
                    after,
                )


def _type_name(kind: type) -> str:
    return {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true or false",
        list: "a list",
        dict: "a table",
    }.get(kind, kind.__name__)


def _closest(key: str, options: list[str]) -> str | None:
    import difflib

    match = difflib.get_close_matches(key, options, n=1)
    return match[0] if match else None


def _world(
    reader: _Reader, base: WorldSpec, table: Mapping[str, Any], prefix: str, after: int = 0
) -> WorldSpec:
    reader.unknown(table, _WORLD_TYPES, prefix, after)
    values = {k: reader.typed(f"{prefix}{k}", v, _WORLD_TYPES[k], after) for k, v in table.items()}
    if "last_modified" in values:
        shares = values["last_modified"]
        for mode, share in shares.items():
            reader.typed(f"{prefix}last_modified.{mode}", share, float, after)
        values["last_modified"] = {k: float(v) for k, v in shares.items()}
    spec = replace(base, **values)
    problems = spec.problems()
    if problems:
        key, fix = problems[0]
        value = getattr(spec, key)
        raise reader.fail(f"{prefix}{key}", f"{value!r} is not possible: {fix}", after)
    return spec


def _budget(
    reader: _Reader,
    table: Mapping[str, Any],
    pages: int,
    key: str,
    default: int | None,
    after: int = 0,
) -> int:
    has_budget, has_share = "budget" in table, "budget_share" in table
    if has_budget and has_share:
        raise reader.fail(f"{key}budget", "give budget or budget_share, not both", after)
    if has_budget:
        budget = reader.typed(f"{key}budget", table["budget"], int, after)
        if budget < 1:
            raise reader.fail(f"{key}budget", f"{budget} is not possible: give >= 1 crawl", after)
        return int(budget)
    if has_share:
        share = reader.typed(f"{key}budget_share", table["budget_share"], float, after)
        if not 0 < share <= 1:
            raise reader.fail(f"{key}budget_share", f"{share} is not in (0, 1]", after)
        return max(1, round(share * pages))
    if default is None:
        raise reader.fail("budget", "missing: give budget (crawls per period) or budget_share")
    return default


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    """Validate a scenario file's text; raises :class:`ScenarioError` (one line)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"{source}: not valid TOML: {error}") from None
    reader = _Reader(text, source)
    reader.unknown(data, _TOP_KEYS, "")
    for key, kind in _TOP_KEYS.items():
        if key in data:
            data[key] = reader.typed(key, data[key], kind)
    for key in ("name", "periods", "policies"):
        if key not in data:
            raise ScenarioError(
                f"{source}: {key}: missing; a scenario needs name, periods, "
                "budget or budget_share, and [[policies]]"
            )
    name = data["name"]
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise reader.fail("name", "use letters, digits, '-', '_' or '.' only")
    periods, warmup, cycle = data["periods"], data.get("warmup", 0), data.get("cycle", 7)
    for key, value, low in (("periods", periods, 1), ("warmup", warmup, 0), ("cycle", cycle, 1)):
        if value < low:
            raise reader.fail(key, f"{value} is not possible: give an integer >= {low}")
    seeds = tuple(data.get("seeds", [0]))
    if not seeds or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds
    ):
        raise reader.fail("seeds", "give a non-empty list of integers >= 0")
    metrics = tuple(data.get("metrics", ["freshness", "obsolescence", "obsolete_pages"]))
    for metric in metrics:
        if metric not in METRICS:
            raise reader.fail(
                "metrics", f"unknown metric {metric!r} (metrics: {', '.join(METRICS)})"
            )
    world = _world(reader, WorldSpec(), data.get("world", {}), "world.")
    profile = data.get("budget_profile", [])
    if not all(isinstance(m, int | float) and not isinstance(m, bool) for m in profile):
        raise reader.fail("budget_profile", "give a list of numbers (budget multipliers)")
    problem = budget_profile_problem(profile)
    if problem:
        raise reader.fail("budget_profile", problem)
    importance = data.get("importance", "true")
    if importance not in ("true", "opic"):
        raise reader.fail("importance", f"use 'true' or 'opic', got {importance!r}")
    if importance == "opic" and world.links_per_page <= 0:
        raise reader.fail("importance", "'opic' needs a link graph: set world.links_per_page > 0")
    budget = _budget(reader, data, world.pages, "", None)
    policies = []
    names = set()
    for index, entry in enumerate(data["policies"]):
        after = _table_line(text, "policies", index)
        key = f"policies[{index + 1}]."
        if not isinstance(entry, dict):
            raise reader.fail("policies", "each entry must be a table ([[policies]])")
        reader.unknown(entry, _POLICY_TYPES, key, after)
        if "kind" not in entry:
            raise reader.fail(f"{key}kind", f"missing: use one of {', '.join(POLICY_KINDS)}", after)
        typed = {k: reader.typed(f"{key}{k}", v, _POLICY_TYPES[k], after) for k, v in entry.items()}
        try:
            make_policy(typed, period_days=world.period_days)
        except PolicyError as error:
            bad = str(error).split(":", 1)[0]
            raise reader.fail(f"{key}{bad}", str(error).split(":", 1)[-1].strip(), after) from None
        label = str(typed.get("name", typed["kind"]))
        if label in names:
            raise reader.fail(
                f"{key}name", f"{label!r} is used twice: give each policy a name", after
            )
        names.add(label)
        policies.append(typed)
    variants = []
    for index, entry in enumerate(data.get("variants", [])):
        after = _table_line(text, "variants", index)
        key = f"variants[{index + 1}]."
        if not isinstance(entry, dict):
            raise reader.fail("variants", "each entry must be a table ([[variants]])")
        reader.unknown(entry, _VARIANT_KEYS, key, after)
        if "name" not in entry:
            raise reader.fail(f"{key}name", "missing: name each variant", after)
        label = reader.typed(f"{key}name", entry["name"], str, after)
        vworld = _world(
            reader,
            world,
            reader.typed(f"{key}world", entry.get("world", {}), dict, after),
            f"{key}world.",
            after,
        )
        share_default = (
            budget
            if ("budget" in data or vworld.pages == world.pages)
            else max(1, round(budget * vworld.pages / world.pages))
        )
        vbudget = _budget(reader, entry, vworld.pages, key, share_default, after)
        vperiods = reader.typed(f"{key}periods", entry.get("periods", periods), int, after)
        if vperiods < 1:
            raise reader.fail(f"{key}periods", f"{vperiods} is not possible: give >= 1", after)
        variants.append(Variant(label, vworld, vperiods, vbudget))
    if not variants:
        variants.append(Variant("", world, periods, budget))
    return Scenario(
        name=name,
        title=data.get("title", name),
        description=data.get("description", ""),
        periods=periods,
        warmup=warmup,
        cycle=cycle,
        seeds=seeds,
        warm_start=data.get("warm_start", True),
        importance=importance,
        metrics=metrics,
        policies=tuple(policies),
        variants=tuple(variants),
        budget_profile=tuple(float(m) for m in profile),
    )


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A shipped scenario by name, or a scenario file by path."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        shipped = SHIPPED_DIR / f"{name_or_path}.toml"
        if not shipped.exists():
            names = ", ".join(sorted(p.stem for p in SHIPPED_DIR.glob("*.toml")))
            raise ScenarioError(
                f"{name_or_path}: no such scenario file or shipped scenario (shipped: {names})"
            )
        path = shipped
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError(f"{path}: cannot read: {error.strerror or error}") from None
    return replace(parse_scenario(text, str(path)), source=path)


def shipped_scenarios() -> list[Scenario]:
    """Every shipped scenario, by name."""
    return [load_scenario(p) for p in sorted(SHIPPED_DIR.glob("*.toml"))]

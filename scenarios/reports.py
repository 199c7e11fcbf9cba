"""Write a scenario run's report into a directory it is handed (markdown, CSV, PNG).

Files written (``NAME`` is the scenario's name)::

    NAME.md                  summary: settings, the key table, the gap to the oracle, plots
    NAME-metrics.csv         every metric, per variant, policy, seed and period
    NAME-metrics.parquet     the same, typed (pyarrow)
    NAME-summary.csv         every metric averaged over measured periods and seeds
    NAME-crawls-by-rate.csv  crawls per cycle by true change rate
    NAME-freshness.png       freshness per period per policy (one panel per variant)
    NAME-obsolete.png        obsolete pages per period per policy
    NAME-crawls-by-rate.png  crawls per page per cycle by true change rate: the planner
                             policies beside the freshness optimum (and uniform)

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from scenarios.runner import ScenarioRun

__all__ = ["by_rate_policies", "crawls_by_rate_table", "key_table", "write_report"]

_LABELS = {
    "freshness": "freshness",
    "age": "age (periods)",
    "obsolescence": "obsolescence",
    "freshness_w": "freshness (by importance)",
    "age_w": "age by importance",
    "obsolescence_w": "obsolescence by importance",
    "obsolete_pages": "obsolete pages",
    "uncrawled_pages": "uncrawled pages",
    "change_ratio": "ChangeRatio",
    "crawls": "crawls/period",
    "wasted": "wasted crawls",
    "alive": "pages",
    "deferred": "deferred (politeness)",
    "freshness_share": "share of optimum's gain (freshness)",
    "obsolescence_share": "share of optimum's gain (obsolescence)",
}
#: Policy kinds that plan with the bucket model (drawn beside the optimum by rate).
_PLANNER_KINDS = ("webfountain", "cohorts")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.2f}"
    return str(value)


def _markdown_table(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join([head, rule, *rows])


def key_table(run: ScenarioRun) -> pd.DataFrame:
    """The summary's key columns: variant, policy, rates, the scenario's metrics, the gaps,
    and the share of the optimum's gain over uniform (freshness; obsolescence when the
    scenario's metrics show it)."""
    columns = ["variant", "policy", "rates", *run.scenario.metrics]
    columns += ["freshness_gap", "obsolescence_gap", "freshness_share"]
    if "obsolescence" in run.scenario.metrics:
        columns.append("obsolescence_share")
    columns = [c for c in columns if c in run.summary.columns]
    table = run.summary[columns].copy()
    if (table["variant"] == "").all():
        table = table.drop(columns="variant")
    return table.rename(columns={k: _LABELS.get(k, k) for k in table.columns})


def _panels(run: ScenarioRun) -> list[str]:
    return list(dict.fromkeys(run.summary["variant"]))


def _plot_per_period(run: ScenarioRun, metric: str, path: Path) -> None:
    variants = _panels(run)
    fig, axes = plt.subplots(
        1, len(variants), figsize=(5.5 * len(variants), 4), squeeze=False, sharey=True
    )
    means = run.metrics.groupby(["variant", "policy", "period"], sort=False)[metric].mean()
    data = means.reset_index()
    for ax, variant in zip(axes[0], variants, strict=True):
        part = data[data["variant"] == variant]
        for policy, series in part.groupby("policy", sort=False):
            ax.plot(series["period"], series[metric], label=str(policy), linewidth=1.2)
        if run.scenario.warmup:
            ax.axvline(0, color="grey", linestyle=":", linewidth=1)
        ax.set_title(variant or run.scenario.name)
        ax.set_xlabel("period (warm-up before 0)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(_LABELS.get(metric, metric))
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def by_rate_policies(run: ScenarioRun) -> list[str]:
    """The policies of the crawls-by-rate plot and table: the freshness optimum, the planner
    policies (kinds ``webfountain``, ``cohorts``) and uniform; every policy when the scenario
    has no planner."""
    kinds = {str(p.get("name", p["kind"])): str(p["kind"]) for p in run.policies}
    planners = [name for name, kind in kinds.items() if kind in _PLANNER_KINDS]
    if not planners:
        return list(dict.fromkeys(run.crawls_by_rate["policy"]))
    references = [run.references.get(r) for r in ("optimum", "uniform")]
    return [name for name in [*references, *planners] if name is not None]


def crawls_by_rate_table(run: ScenarioRun, variant: str) -> pd.DataFrame:
    """Crawls per page per cycle by true-rate class for one variant: one row per policy of
    :func:`by_rate_policies`, one column per class (its geometric middle, changes/period)."""
    table = run.crawls_by_rate[run.crawls_by_rate["variant"] == variant]
    table = table[table["policy"].isin(by_rate_policies(run))]
    middle = (table["rate_low"] * table["rate_high"]) ** 0.5
    wide = table.assign(rate=middle.map(lambda r: f"{r:.2g}")).pivot_table(
        index="policy", columns="rate", values="crawls_per_cycle", sort=False
    )
    order = [p for p in by_rate_policies(run) if p in wide.index]
    return wide.loc[order].reset_index().rename_axis(columns=None)


def _plot_crawls_by_rate(run: ScenarioRun, path: Path) -> None:
    """Crawls per page per cycle by true change rate (log-spaced classes, each page's crawls
    over its measured lifetime), the planner policies beside the freshness optimum."""
    variants = _panels(run)
    fig, axes = plt.subplots(
        1, len(variants), figsize=(5.5 * len(variants), 4), squeeze=False, sharey=True
    )
    table = run.crawls_by_rate
    shown = by_rate_policies(run)
    optimum, uniform = run.references.get("optimum"), run.references.get("uniform")
    for ax, variant in zip(axes[0], variants, strict=True):
        part = table[(table["variant"] == variant) & table["policy"].isin(shown)]
        for policy, series in part.groupby("policy", sort=False):
            middle = (series["rate_low"] * series["rate_high"]) ** 0.5
            style: dict[str, object] = {"marker": "o", "linewidth": 1.2}
            if policy == optimum:
                style = {"marker": "s", "linewidth": 2.4, "color": "black"}
            elif policy == uniform:
                style = {"marker": "", "linewidth": 1.0, "color": "grey", "linestyle": "--"}
            ax.plot(middle, series["crawls_per_cycle"], label=str(policy), **style)
        ax.set_xscale("log")
        ax.set_title(variant or run.scenario.name)
        ax.set_xlabel("true change rate (changes per period)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"crawls per page per cycle ({run.scenario.cycle} periods)")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _accuracy_lines(run: ScenarioRun) -> list[str]:
    """The report's section on the estimating policies' rate estimates (none without)."""
    if run.accuracy.empty:
        return []
    lines = [
        "## Estimation accuracy by the pages' fetches (end of the run, seeds pooled)",
        "",
        "Each estimating policy's crawl log at the end of the run, every known page "
        "estimated from its change/no-change intervals: `point` is the planner's estimate "
        "(`ChangeRateEstimator`; pages with one fetch or none have none), `posterior` the "
        "Gamma posterior's mean under the population prior, `group priors` the same with "
        "empirical-Bayes priors by host and by site section (a never-fetched page gets its "
        "section's prior). `|ln|`: median |ln(estimate / true rate)|; coverage: how often the "
        "true rate lies in the posterior's 80 % credible interval (0.80 when calibrated).",
        "",
    ]
    for (variant, policy), table in run.accuracy.groupby(["variant", "policy"], sort=False):
        lines += [
            f"**{variant or run.scenario.name}, {policy}**",
            "",
            _markdown_table(table.drop(columns=["variant", "policy"])),
            "",
        ]
    return lines


def write_report(run: ScenarioRun, out_dir: Path) -> list[Path]:
    """Write the report files of ``run`` into ``out_dir`` (created); returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scenario = run.scenario
    name = scenario.name
    paths = {
        "md": out_dir / f"{name}.md",
        "metrics": out_dir / f"{name}-metrics.csv",
        "parquet": out_dir / f"{name}-metrics.parquet",
        "summary": out_dir / f"{name}-summary.csv",
        "crawls": out_dir / f"{name}-crawls-by-rate.csv",
        "fresh": out_dir / f"{name}-freshness.png",
        "obsolete": out_dir / f"{name}-obsolete.png",
        "by_rate": out_dir / f"{name}-crawls-by-rate.png",
    }
    run.metrics.to_csv(paths["metrics"], index=False)
    run.metrics.to_parquet(paths["parquet"], index=False)
    run.summary.to_csv(paths["summary"], index=False)
    run.crawls_by_rate.to_csv(paths["crawls"], index=False)
    _plot_per_period(run, "freshness", paths["fresh"])
    _plot_per_period(run, "obsolete_pages", paths["obsolete"])
    _plot_crawls_by_rate(run, paths["by_rate"])
    settings = []
    for v in scenario.variants:
        w = v.world
        settings.append(
            f"| {v.name or name} | {w.pages:,} | {w.hosts} | {w.rate_model} | {v.budget:,} | "
            f"{v.periods} | {w.period_days:g} |"
        )
    bounds = run.summary.groupby("variant", sort=False)["freshness_bound"].first()
    obs_bounds = run.summary.groupby("variant", sort=False)["obsolescence_bound"].first()
    lines = [
        f"# {scenario.title}",
        "",
        scenario.description,
        "",
        f"Scenario `{name}`{' (quick version)' if scenario.quick else ''}: "
        f"{len(scenario.seeds)} seed(s) {list(scenario.seeds)}, warm-up {scenario.warmup} "
        f"periods, {'warm' if scenario.warm_start else 'cold'} start, cycle "
        f"{scenario.cycle} periods; ran in {run.seconds:.1f} s.",
        "",
        "| variant | pages | hosts | rates | budget (crawls/period) | periods | days/period |",
        "|---|---|---|---|---|---|---|",
        *settings,
        "",
        "## Key table (means over the measured periods and the seeds)",
        "",
        "`rates`: `true` = oracle (sees the true change rates), `estimated` = its own "
        "estimates from its own crawls, `-` = uses no rates. Gaps are to the oracle optimum "
        "for the true rates at this budget (freshness: Cho & Garcia-Molina's optimal periodic "
        "schedule, negative = below it; obsolescence: Xyleme's sqrt schedule, positive = "
        "above it), exact for a Poisson web without rhythms, births or deaths. Share of the "
        "optimum's gain: (policy - uniform) / (optimum - uniform) in the same variant, the "
        "optimum being the simulated run of the optimal schedule with true rates "
        f"(freshness: {run.references.get('optimum', '-')!r}"
        + (
            f"; obsolescence: {run.references['optimum_obsolescence']!r}"
            if "optimum_obsolescence" in run.references
            else ""
        )
        + "): 1 = all of the optimum's gain over uniform, 0 = none.",
        "",
        *[f"Note: {note}." for note in run.notes],
        *([""] if run.notes else []),
        _markdown_table(key_table(run)),
        "",
        "Oracle optima (true rates, at most one crawl per page per period): "
        + ", ".join(
            f"{k or name}: freshness {f:.4f}, obsolescence {o:.4f}"
            for (k, f), o in zip(bounds.items(), obs_bounds.tolist(), strict=True)
        )
        + ".",
        "",
        f"![freshness]({paths['fresh'].name})",
        f"![obsolete pages]({paths['obsolete'].name})",
        f"![crawls per cycle]({paths['by_rate'].name})",
        "",
        f"## Crawls per page per cycle ({scenario.cycle} periods) by true change rate",
        "",
        "Columns: the middle of each half-decade class of true change rates (changes per "
        "period); each page's crawls over its measured lifetime.",
        "",
        *[
            line
            for v in _panels(run)
            for line in (
                f"**{v or name}**",
                "",
                _markdown_table(crawls_by_rate_table(run, v)),
                "",
            )
        ],
        *_accuracy_lines(run),
        f"Every metric: `{paths['summary'].name}` (means), `{paths['metrics'].name}` and "
        f"`{paths['parquet'].name}` (per period), `{paths['crawls'].name}` (crawls per cycle "
        "by change rate).",
        "",
    ]
    paths["md"].write_text("\n".join(lines), encoding="utf-8")
    return list(paths.values())

"""The live loop on several worlds: crawlplan beside a uniform recrawl at the same budget.

Run as a script (``python tests/benchmarks/live_loop.py``; not part of ``make bench``: it
takes about three minutes a run). For each world of :data:`service.demo.WORLDS` (the demo's
web, and worlds built to differ from it) and each seed it runs ``crawlplan demo``'s loop
(:func:`service.demo.run_demo`: the production loop, with the nightly pipeline every cycle,
each side's worker API releasing its periods and its worker pool leasing over HTTP, each in a
process of its own, each crawl against its own server) and prints one row:

* steady-state freshness (time-averaged after the warm-up, at least one uniform revisit of
  every page, from each server's request log and the true change times) of crawlplan and of
  the uniform recrawl (a round robin, never-fetched pages first);
* the references computed from the true rates at the same budget: the uniform recrawl and
  the freshness-optimal schedule (each host's polite capacity respected), and crawlplan's
  share of the optimum's gain over the measured uniform, ``(crawlplan - uniform) /
  (optimum - uniform)``; and its share of the computed gain, ``(crawlplan - uniform) /
  (optimum - uniform computed)``, which assumes the loop costs every crawl what it costs
  the round robin (``--oracle`` measured otherwise: a plan on the true rates reaches the
  computed optimum live, and the round robin's shortfall is its own, the crawls it spends on
  the hosts' redirects and malformed pages), so the first share is the one to read;
* capacity used: pages fetched of pages released, each crawl;
* politeness violations (gaps shorter than the host's delay) and requests robots.txt
  disallows, each from that crawl's server's own request log.

With ``--oracle`` each world and seed is run a second time with the crawlplan side planning on
the web's true rates (:attr:`service.demo.DemoSettings.oracle`: nothing estimated), and the row
adds that live optimum and crawlplan's share of its gain, ``(crawlplan - uniform) / (oracle -
uniform of the oracle's run)``: both gains measured live, each against the uniform recrawl
beside it, so the loop's own losses (periods, releases, politeness, pages that do not answer)
are charged to both.

Options: ``--worlds``, ``--seeds``, ``--hosts``, ``--pages``, ``--period``, ``--periods``,
``--cycles``, ``--capacity``, ``--oracle``, ``--dir`` (scratch, recreated per run).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from scenarios.demo_report import share_of_gain
from service.demo import WORLDS, DemoReport, DemoSettings, run_demo


def _used(report: DemoReport, name: str) -> float:
    released = sum(report.released.get(name, []))
    return sum(report.fetched_per_period.get(name, [])) / max(released, 1)


def _live_optimum(gain: float, oracles: list[DemoReport]) -> str:
    """The oracle run's freshness and its uniform's, and the share of its gain ``gain`` is."""
    if not oracles:
        return "| "
    if not oracles[0].steady:
        return "no steady state | "
    best, uniform = oracles[0].steady["crawlplan"], oracles[0].steady["uniform"]
    return f"{best:.3f}, {uniform:.3f} | {share_of_gain(gain, 0.0, best - uniform):.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worlds", nargs="+", default=list(WORLDS), choices=WORLDS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[7, 8])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--period", type=float, default=6.0)
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--capacity", type=int, default=500)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--oracle", action="store_true")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="live-loop-"))
    n = args.hosts * args.pages
    print(
        f"live loop: {args.hosts} hosts x {args.pages} pages = {n:,} pages, {args.capacity} "
        f"crawls per {args.period:g} s period, {args.periods} periods a cycle, {args.cycles} "
        "cycles; crawlplan beside a uniform recrawl at the same budget",
        flush=True,
    )
    rows = [
        "| world | seed | crawlplan | uniform | uniform (computed) | optimum (computed) "
        "| share of the optimum's gain | share of the computed gain "
        "| fetched / released, crawlplan | uniform "
        "| politeness violations | robots.txt violations "
        "| oracle (live), its uniform | share of the live optimum's gain |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for world in args.worlds:
        for seed in args.seeds:
            runs = [False, True] if args.oracle else [False]
            reports = []
            for oracle in runs:
                directory = scratch / f"{world}-{seed}{'-oracle' if oracle else ''}"
                shutil.rmtree(directory, ignore_errors=True)
                settings = DemoSettings(
                    directory,
                    hosts=args.hosts,
                    pages=args.pages,
                    period=args.period,
                    periods=args.periods,
                    cycles=args.cycles,
                    capacity=args.capacity,
                    workers=args.workers,
                    world=world,
                    seed=seed,
                    oracle=oracle,
                )
                reports.append(run_demo(settings, say=lambda _line: None))
            report = reports[0]
            if not report.steady:
                rows.append(f"| {world} | {seed} | no steady state: run more cycles |")
                print(rows[-1], flush=True)
                continue
            planned, uniform = report.steady["crawlplan"], report.steady["uniform"]
            share = share_of_gain(planned, uniform, report.optimum)
            # both gains between two crawls under the same conditions: crawlplan's over the
            # uniform recrawl measured side by side, the optimum's over uniform computed
            computed = share_of_gain(
                planned - uniform, 0.0, report.optimum - report.uniform_computed
            )
            rows.append(
                f"| {world} | {seed} | {planned:.3f} | {uniform:.3f} "
                f"| {report.uniform_computed:.3f} | {report.optimum:.3f} | {share:.0%} "
                f"| {computed:.0%} "
                f"| {_used(report, 'crawlplan'):.1%} | {_used(report, 'uniform'):.1%} "
                f"| {report.impolite['crawlplan']} / {report.impolite['uniform']} "
                f"| {report.disallowed['crawlplan']} / {report.disallowed['uniform']} "
                f"| {_live_optimum(planned - uniform, reports[1:])} |"
            )
            print(
                f"{world} seed {seed}: {report.elapsed:.0f} s, warm-up "
                f"{report.warmup_cycles} cycles\n{rows[-1]}",
                flush=True,
            )
    print("\n".join(["", *rows]))


if __name__ == "__main__":
    main()

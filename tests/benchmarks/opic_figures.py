"""The OPIC paper's Figures 2-4 on synthetic power-law graphs: numbers and PNG plots.

Run with ``.venv/bin/python tests/benchmarks/opic_figures.py`` (about two minutes). Writes
``docs/figures/opic_convergence.png`` (Figures 2-3: error after k x N crawled pages, all pages
and the top 10 %), ``docs/figures/opic_windows.png`` (Figure 4: window policies on a changing
graph) and ``docs/figures/opic_results.json``, and prints the numbers as Markdown tables.

Options: ``--pages N`` (default 100,000), ``--links M`` (default 8 per page), ``--seed S``,
``--out DIR``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from scenarios.opic_experiments import (
    ConvergenceResult,
    WindowResult,
    convergence_experiment,
    window_experiment,
)

ROOT = Path(__file__).resolve().parents[2]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _convergence_plot(result: ConvergenceResult, path: Path) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, errors, title in (
        (axes[0], result.errors, "Figure 2: all pages"),
        (axes[1], result.top_errors, "Figure 3: top 10 % pages"),
    ):
        for name, values in errors.items():
            style = "--" if name == "power iteration" else "-o"
            axis.plot(result.multiples, [100 * v for v in values], style, label=name, ms=3)
        axis.set_xlabel("crawled pages / N")
        axis.set_ylabel("mean relative error (%)")
        axis.set_yscale("log")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.suptitle(
        f"OPIC convergence to the PageRank fixpoint ({result.n_pages:,} pages, "
        f"{result.n_links:,} links, power law)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _window_plot(result: WindowResult, path: Path) -> None:
    figure, axis = plt.subplots(figsize=(7, 4.2))
    rates = [100 * r for r in result.change_rates]
    for name, values in result.errors.items():
        style = "--" if name == "full history" else "-o"
        axis.plot(rates, [100 * v for v in values], style, label=name, ms=3)
    axis.set_xlabel("pages whose in-degree doubles or halves per N crawled pages (%)")
    axis.set_ylabel("mean relative error (%)")
    axis.set_title(
        f"Figure 4: Adaptive OPIC (Greedy) on a changing graph ({result.n_pages:,} pages)"
    )
    axis.grid(True, alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--links", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    args = parser.parse_args()
    links = args.links if args.links is not None else 8 * args.pages
    args.out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    convergence = convergence_experiment(args.pages, links, seed=args.seed)
    convergence_s = time.perf_counter() - start
    start = time.perf_counter()
    windows = window_experiment(args.pages, links, seed=args.seed)
    windows_s = time.perf_counter() - start

    _convergence_plot(convergence, args.out / "opic_convergence.png")
    _window_plot(windows, args.out / "opic_windows.png")
    (args.out / "opic_results.json").write_text(
        json.dumps({"convergence": asdict(convergence), "windows": asdict(windows)}, indent=1)
        + "\n"
    )

    header = ["strategy", *[f"{k:g} N" for k in convergence.multiples]]
    for label, errors in (("all pages", convergence.errors), ("top 10 %", convergence.top_errors)):
        print(f"\nMean relative error, {label} ({convergence_s:.0f} s):\n")
        rows = [[name, *[f"{100 * v:.1f} %" for v in values]] for name, values in errors.items()]
        print(_table(header, rows))
    print(
        f"\nWindows on a changing graph, Greedy, error over the last N crawls "
        f"({windows_s:.0f} s):\n"
    )
    header = ["policy", "measures/page", *[f"{100 * r:g} %" for r in windows.change_rates]]
    rows = [
        [name, f"{windows.measures[name]:.1f}", *[f"{100 * v:.1f} %" for v in values]]
        for name, values in windows.errors.items()
    ]
    print(_table(header, rows))
    print(f"\nwrote {args.out}/opic_convergence.png, opic_windows.png, opic_results.json")


if __name__ == "__main__":
    main()

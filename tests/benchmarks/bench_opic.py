"""OPIC benchmark: cash transfers per second, a 1,000,000-page graph crawled 3 x N times.

Run with ``make bench`` (or ``.venv/bin/python tests/benchmarks/bench_opic.py``). On a seeded
power-law graph (``scenarios.graphs.power_law_graph``; default 1,000,000 pages, 10,000,000
edges drawn), each figure beside a baseline measured in the same run:

* build: the graph from its edge arrays (CSR, duplicates and self-loops dropped);
* transfers: cash transfers per second of :meth:`estimators.opic.OPIC.crawl` in batch mode
  (random batches of 1 % of the pages; target >= 5,000,000/s), beside the paper's pseudocode
  as a plain Python loop and a per-page numpy loop (``C[children] += C[i] / k``) on the
  first pages of the same batches;
* crawl: 3 x N page crawls with Greedy (top 1 % by cash per step, ``argpartition``) and Cycle,
  end to end (target < 60 s), with the error against PageRank at the end;
* PageRank: the reference power iteration (scipy.sparse, tol 1e-10) on the same graph;
* peak memory (``resource.getrusage``).

Options: ``--pages N``, ``--links M``, ``--seed S``.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from estimators.opic import OPIC
from estimators.opic_graph import LinkGraph
from estimators.opic_selection import CycleSelection, GreedySelection, PageSelection
from estimators.pagerank import pagerank
from scenarios.graphs import power_law_graph


def _python_loop(graph: LinkGraph, pages: np.ndarray, damping: float) -> tuple[int, float]:
    """The paper's pseudocode, one page at a time in plain Python: transfers and seconds."""
    indptr = graph.indptr.tolist()
    indices = graph.indices.tolist()
    n = graph.n_pages
    cash = [1.0 / n] * (n + 1)
    history = [0.0] * (n + 1)
    transfers = 0
    start = time.perf_counter()
    for i in pages.tolist():
        c = cash[i]
        history[i] += c
        lo, hi = indptr[i], indptr[i + 1]
        if hi > lo:
            share = damping * c / (hi - lo)
            for j in indices[lo:hi]:
                cash[j] += share
            cash[n] += c - share * (hi - lo)
            transfers += hi - lo
        else:
            cash[n] += c
        cash[i] = 0.0
    return transfers, time.perf_counter() - start


def _numpy_per_page(graph: LinkGraph, pages: np.ndarray, damping: float) -> tuple[int, float]:
    """A naive numpy version: one fancy-indexed add per crawled page."""
    n = graph.n_pages
    cash = np.full(n + 1, 1.0 / n)
    history = np.zeros(n + 1)
    transfers = 0
    start = time.perf_counter()
    for i in pages.tolist():
        c = cash[i]
        history[i] += c
        children = graph.indices[graph.indptr[i] : graph.indptr[i + 1]]
        if children.size:
            cash[children] += damping * c / children.size
            cash[n] += (1 - damping) * c
            transfers += children.size
        else:
            cash[n] += c
        cash[i] = 0.0
    return transfers, time.perf_counter() - start


def _crawl(graph: LinkGraph, selection: PageSelection, visits: int, batch: int) -> OPIC:
    opic = OPIC().start(graph.n_pages)
    n = graph.n_pages
    while opic.state_.crawls < visits:
        opic.crawl(
            graph, selection.select(opic.state_.cash[:n], min(batch, visits - opic.state_.crawls))
        )
    return opic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--links", type=int, default=10_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    n = args.pages
    print(f"OPIC benchmark: {n:,} pages, {args.links:,} edges drawn, seed {args.seed}")

    start = time.perf_counter()
    graph = power_law_graph(n, args.links, seed=args.seed)
    build_s = time.perf_counter() - start
    edges = (graph.sources, graph.indices)
    start = time.perf_counter()
    LinkGraph.from_edges(*edges, n)
    csr_s = time.perf_counter() - start
    print(
        f"graph: {graph.n_links:,} links ({graph.duplicates_dropped:,} duplicates, "
        f"{graph.self_loops_dropped:,} self-loops dropped), "
        f"{np.mean(graph.out_degree == 0):.1%} dangling pages; generated in {build_s:.2f} s, "
        f"CSR from {graph.n_links:,} edge pairs in {csr_s:.2f} s"
    )

    rng = np.random.default_rng(args.seed)
    batch = max(1, n // 100)
    batches = [rng.choice(n, size=batch, replace=False) for _ in range(30)]
    opic = OPIC().start(n)
    start = time.perf_counter()
    for pages in batches:
        opic.crawl(graph, pages)
    batch_s = time.perf_counter() - start
    batch_rate = opic.state_.transfers / batch_s
    sample = np.concatenate([pages[: max(1, batch // 50)] for pages in batches])
    loop_transfers, loop_s = _python_loop(graph, sample, 0.85)
    numpy_transfers, numpy_s = _numpy_per_page(graph, sample, 0.85)
    loop_rate = loop_transfers / loop_s
    numpy_rate = numpy_transfers / numpy_s
    print(
        f"transfers, batch mode ({batch:,} pages per step): {batch_rate:,.0f}/s "
        f"(target >= 5,000,000/s: {'met' if batch_rate >= 5e6 else 'MISSED'}); "
        f"total cash after {opic.state_.transfers:,} transfers: {opic.total_cash()!r}"
    )
    print(
        f"  baselines on {sample.size:,} of the same pages: plain Python loop "
        f"{loop_rate:,.0f}/s (x{batch_rate / loop_rate:.0f}), numpy per page "
        f"{numpy_rate:,.0f}/s (x{batch_rate / numpy_rate:.0f})"
    )

    start = time.perf_counter()
    reference = pagerank(graph, tol=1e-10)
    pagerank_s = time.perf_counter() - start
    print(
        f"PageRank (power iteration, tol 1e-10): {pagerank_s:.2f} s, "
        f"{reference.iterations} iterations, residual {reference.residual:.1e}"
    )
    top = np.argsort(-reference.scores)[: n // 10]
    for name, selection in (("greedy", GreedySelection()), ("cycle", CycleSelection())):
        start = time.perf_counter()
        run = _crawl(graph, selection, 3 * n, batch)
        crawl_s = time.perf_counter() - start
        error = np.abs(run.importance() / reference.scores - 1.0)
        print(
            f"crawl 3 x N = {3 * n:,} pages, {name}: {crawl_s:.2f} s "
            f"(target < 60 s: {'met' if crawl_s < 60 else 'MISSED'}; "
            f"{crawl_s / pagerank_s:.1f} x the PageRank time), "
            f"{run.state_.transfers / crawl_s:,.0f} transfers/s end to end; mean relative "
            f"error {error.mean():.1%}, top 10 % {error[top].mean():.1%}; "
            f"total cash {run.total_cash()!r}"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (ru_maxrss): {peak:,.0f} MiB")


if __name__ == "__main__":
    main()

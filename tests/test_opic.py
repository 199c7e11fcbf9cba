"""OPIC, Adaptive OPIC and the reference PageRank (estimators.opic*, estimators.pagerank)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from estimators.opic import CASH_QUANTUM, OPIC, interest_weights, split_cash, spread_cash
from estimators.opic_graph import EmptyGraphError, GraphError, LinkGraph, UnknownPageError
from estimators.opic_selection import (
    STRATEGIES,
    CycleSelection,
    GreedySelection,
    PageSelection,
    RandomSelection,
)
from estimators.opic_windows import InterpolationWindow, VariableWindow
from estimators.pagerank import pagerank
from scenarios.graphs import change_in_degrees, power_law_graph
from scenarios.opic_experiments import convergence_experiment, window_experiment

SEED = 20260521


def _ring_with_chords(n: int, chords: int, seed: int) -> LinkGraph:
    """A strongly connected graph: a ring 0 -> 1 -> ... -> 0 plus random chords."""
    rng = np.random.default_rng(seed)
    src = np.r_[np.arange(n), rng.integers(0, n, chords)]
    dst = np.r_[(np.arange(n) + 1) % n, rng.integers(0, n, chords)]
    return LinkGraph.from_edges(src, dst, n)


def _stationary_with_virtual_page(
    graph: LinkGraph, damping: float, weights: NDArray[np.float64]
) -> NDArray[np.float64]:
    """PageRank from the dense (n + 1)-state chain through the virtual page, by linear algebra."""
    n = graph.n_pages
    chain = np.zeros((n + 1, n + 1))
    for i in range(n):
        links = graph.outlinks(i)
        if links.size:
            chain[i, links] = damping / links.size
            chain[i, n] = 1.0 - damping
        else:
            chain[i, n] = 1.0
    chain[n, :n] = weights
    # Solve pi (P - I) = 0 with sum(pi) = 1.
    system = np.vstack([(chain - np.eye(n + 1)).T, np.ones(n + 1)])
    rhs = np.r_[np.zeros(n + 1), 1.0]
    pi = np.linalg.lstsq(system, rhs, rcond=None)[0]
    return np.asarray(pi[:n] / pi[:n].sum())


# --- the graph ---------------------------------------------------------------------------------


def test_from_edges_drops_self_loops_and_duplicates_and_keeps_dangling_pages() -> None:
    graph = LinkGraph.from_edges([0, 0, 0, 1, 1, 2], [1, 1, 0, 2, 0, 0], n_pages=4)
    assert graph.n_pages == 4
    assert graph.self_loops_dropped == 1
    assert graph.duplicates_dropped == 1
    assert graph.outlinks(0).tolist() == [1]
    assert graph.outlinks(1).tolist() == [0, 2]
    assert graph.out_degree.tolist() == [1, 2, 1, 0]  # page 3 is dangling
    assert graph.sources.tolist() == [0, 1, 1, 2]


@pytest.mark.parametrize(
    ("src", "dst", "n_pages", "error", "words"),
    [
        ([], [], None, EmptyGraphError, "no edge and no page"),
        ([], [], 0, EmptyGraphError, "no page"),
        ([0, 5], [1, 2], 3, UnknownPageError, "src outside the pages 0..2 (first: 5)"),
        ([0], [-1], 3, UnknownPageError, "dst outside"),
        ([0, 1], [1], None, GraphError, "differ in length"),
        ([0.5], [1.0], None, GraphError, "integer page ids"),
    ],
)
def test_from_edges_rejects_bad_input_with_a_message(
    src: list[float], dst: list[float], n_pages: int | None, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        LinkGraph.from_edges(src, dst, n_pages)
    assert issubclass(error, ValueError)


def test_a_graph_without_links_gives_uniform_importance() -> None:
    graph = LinkGraph.from_edges([], [], n_pages=5)
    opic = OPIC().start(5)
    for _ in range(50):
        opic.crawl(graph, GreedySelection().select(opic.state_.cash[:5], 2))
    np.testing.assert_allclose(opic.importance(), 0.2, rtol=1e-12)
    np.testing.assert_allclose(pagerank(graph).scores, 0.2, rtol=1e-12)


# --- cash arithmetic ---------------------------------------------------------------------------


@given(
    units=st.lists(st.integers(0, 2**52), min_size=1, max_size=20),
    degrees=st.lists(st.integers(0, 10**6), min_size=20, max_size=20),
    damping=st.floats(0.0, 1.0),
)
@settings(max_examples=200, deadline=None, derandomize=True)
def test_split_cash_is_exact(units: list[int], degrees: list[int], damping: float) -> None:
    cash = np.array(units, dtype=np.float64) * CASH_QUANTUM
    degree = np.array(degrees[: len(units)], dtype=np.int64)
    share, rest = split_cash(cash, degree, damping)
    assert np.all(share >= 0) and np.all(rest >= 0)
    assert np.array_equal(share * degree + rest, cash)  # exact, not approximately
    assert np.all(share[degree == 0] == 0)


def test_spread_cash_is_exact_uniform_and_weighted() -> None:
    amount = 12345 * CASH_QUANTUM + 0.25
    gift, kept = spread_cash(amount, None, 7)
    assert gift.sum() + kept == amount and kept >= 0 and np.all(gift == gift[0])
    weights = interest_weights(np.array([True, False, False, True]), boost=3.0)
    gift, kept = spread_cash(amount, weights, 4)
    assert gift.sum() + kept == amount and 0 <= kept < 1e-10
    assert gift[0] == gift[3] and abs(gift[0] / gift[1] - 3.0) < 1e-9


def test_total_cash_is_exactly_one_after_millions_of_transfers() -> None:
    graph = power_law_graph(3_000, 30_000, seed=SEED)
    weights = interest_weights(np.arange(3_000) % 7 == 0, boost=5.0)
    for opic, selection in (
        (OPIC(), RandomSelection(seed=SEED)),
        (OPIC(damping=1.0, interest=weights, window=VariableWindow(3)), GreedySelection()),
    ):
        opic.start(graph.n_pages)
        while opic.state_.transfers < 1_500_000:
            opic.crawl(graph, selection.select(opic.state_.cash[:-1], 400))
            assert opic.total_cash() == 1.0  # Lemma 2.2, exactly, at every step
        assert np.all(opic.state_.cash >= 0)
        # G is the sum of all histories (to rounding: the history is a float sum).
        assert opic.state_.history.sum() == pytest.approx(opic.state_.clock, rel=1e-12)


# --- Lemma 2.3 and convergence -----------------------------------------------------------------


@st.composite
def _runs(draw: st.DrawFn) -> tuple[LinkGraph, float, list[list[int]], bool]:
    n = draw(st.integers(1, 12))
    m = draw(st.integers(0, 40))
    src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    damping = draw(st.sampled_from([0.0, 0.5, 0.85, 1.0]))
    batches = draw(st.lists(st.lists(st.integers(0, n - 1), max_size=n), min_size=1, max_size=30))
    return LinkGraph.from_edges(src, dst, n), damping, batches, draw(st.booleans())


@given(_runs())
@settings(max_examples=150, deadline=None, derandomize=True)
def test_lemma_2_3_holds_after_every_step(
    run: tuple[LinkGraph, float, list[list[int]], bool],
) -> None:
    """``H[j] + C[j] = C0[j] + sum_i L[i, j] H[i]`` with the virtual page as page n."""
    graph, damping, batches, biased = run
    n = graph.n_pages
    weights = interest_weights(np.arange(n) % 2 == 0, boost=4.0) if biased else np.full(n, 1 / n)
    transfer = np.zeros((n + 1, n + 1))  # L[i, j], rows sum to 1
    for i in range(n):
        links = graph.outlinks(i)
        if links.size:
            transfer[i, links] = damping / links.size
        transfer[i, n] = 1.0 - transfer[i, :n].sum()
    transfer[n, :n] = weights
    opic = OPIC(damping=damping, interest=weights if biased else None).start(n)
    for batch in batches:
        opic.crawl(graph, batch)
        state = opic.state_
        assert opic.total_cash() == 1.0
        lhs = state.history + state.cash
        rhs = state.initial_cash + transfer.T @ state.history
        # Each transfer rounds down by less than one quantum: the slack is that rounding.
        slack = (state.crawls + len(batches)) * (n + 1) * CASH_QUANTUM
        np.testing.assert_allclose(lhs, rhs, rtol=0, atol=slack)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_opic_converges_to_the_pagerank_fixpoint(name: str) -> None:
    graph = _ring_with_chords(9, 20, SEED)
    reference = pagerank(graph, tol=1e-15).scores
    np.testing.assert_allclose(
        reference, _stationary_with_virtual_page(graph, 0.85, np.full(9, 1 / 9)), rtol=1e-10
    )
    selection: PageSelection = (
        STRATEGIES[name](seed=SEED) if name != "greedy" else GreedySelection()
    )
    opic = OPIC().start(9)
    errors = []
    for step in range(1, 30_001):
        opic.crawl(graph, selection.select(opic.state_.cash[:9], 3))
        if step in (3_000, 30_000):
            errors.append(np.max(np.abs(opic.importance() / reference - 1.0)))
    # The error bound of the paper is O(1 / G): ten times the crawls, about a tenth the error.
    assert errors[1] < 2e-4, errors
    assert errors[1] < errors[0] / 5, errors
    # The paper's raw estimate sums to 1 - the virtual page's share, and is proportional.
    raw = opic.raw_importance()
    np.testing.assert_allclose(raw / raw.sum(), opic.importance(), rtol=1e-12)


def test_opic_reaches_pagerank_on_a_graph_with_dangling_pages_and_damping_one() -> None:
    # Pages 3 and 4 dangle: their cash, and only theirs, goes through the virtual page.
    graph = LinkGraph.from_edges([0, 0, 1, 2, 2, 1], [1, 2, 2, 0, 3, 4], n_pages=5)
    reference = pagerank(graph, damping=1.0, tol=1e-15).scores
    np.testing.assert_allclose(
        reference, _stationary_with_virtual_page(graph, 1.0, np.full(5, 0.2)), rtol=1e-10
    )
    opic = OPIC(damping=1.0).start(5)
    cycle = CycleSelection()
    for _ in range(20_000):
        opic.crawl(graph, cycle.select(opic.state_.cash[:5], 2))
    np.testing.assert_allclose(opic.importance(), reference, rtol=3e-4)


def test_bias_toward_pages_of_interest_conserves_cash_and_reaches_personalized_pagerank() -> None:
    graph = _ring_with_chords(10, 15, SEED + 1)
    interest = np.arange(10) < 3
    weights = interest_weights(interest, boost=20.0)
    biased = OPIC(interest=weights).start(10)
    plain = OPIC().start(10)
    greedy = GreedySelection()
    for _ in range(20_000):
        biased.crawl(graph, greedy.select(biased.state_.cash[:10], 3))
        plain.crawl(graph, greedy.select(plain.state_.cash[:10], 3))
        assert biased.total_cash() == 1.0
    reference = pagerank(graph, interest=weights, tol=1e-15).scores
    np.testing.assert_allclose(reference, _stationary_with_virtual_page(graph, 0.85, weights))
    np.testing.assert_allclose(biased.importance(), reference, rtol=5e-4)
    assert biased.importance()[interest].sum() > plain.importance()[interest].sum() + 0.05


# --- windows -------------------------------------------------------------------------------------


def test_infinite_windows_are_the_full_history() -> None:
    graph = power_law_graph(500, 3_000, seed=SEED)
    runs = [OPIC(), OPIC(window=InterpolationWindow(np.inf)), OPIC(window=VariableWindow(10**4))]
    selection = RandomSelection(seed=SEED)
    for opic in runs:
        opic.start(500)
    for _ in range(200):
        batch = selection.select(runs[0].state_.cash[:500], 60)
        for opic in runs:
            opic.crawl(graph, batch)
    for opic in runs[1:]:
        np.testing.assert_allclose(opic.importance(), runs[0].importance(), rtol=1e-9)


def test_variable_window_keeps_the_last_k_measures() -> None:
    window = VariableWindow(2)
    window.reset(2)
    pages = np.array([0])
    window.record(pages, np.array([0.5]), 0.0)  # first crawl: measure over [-1, 0]
    window.record(pages, np.array([0.2]), 1.0)
    window.record(pages, np.array([0.3]), 3.0)  # the first measure drops out
    estimate = window.estimate(np.array([0.1, 0.4]), 4.0)
    # Page 0: (0.2 + 0.3 + cash 0.1) over [0, 4]; page 1 never crawled: 0.4 / (G + 1).
    np.testing.assert_allclose(estimate, [0.6 / 4.0, 0.4 / 5.0])
    assert window.measures_per_page() == 1.0


def test_interpolation_keeps_the_share_of_the_window_still_inside() -> None:
    window = InterpolationWindow(2.0)
    window.reset(1)
    pages = np.array([0])
    window.record(pages, np.array([0.4]), 3.0)  # 0.4 over 4 units of G: 0.2 kept for T = 2
    np.testing.assert_allclose(window.window_, [0.2])
    window.record(pages, np.array([0.3]), 4.0)  # half the window is new: 0.2 / 2 + 0.3
    np.testing.assert_allclose(window.window_, [0.4])
    np.testing.assert_allclose(window.estimate(np.array([0.1]), 5.0), [0.5 / 3.0])
    with pytest.raises(ValueError, match="window size must be > 0"):
        InterpolationWindow(0.0)
    with pytest.raises(ValueError, match=">= 1 measures"):
        VariableWindow(0)


def test_windows_follow_a_changed_graph_that_the_full_history_remembers() -> None:
    rng = np.random.default_rng(SEED)
    before = power_law_graph(2_000, 16_000, seed=SEED)
    after, _ = change_in_degrees(before, 0.5, rng)
    runs = {
        "full": OPIC(),
        "interpolation": OPIC(window=InterpolationWindow(2.0)),
        "variable": OPIC(window=VariableWindow(4)),
    }
    errors = {}
    for name, opic in runs.items():
        opic.start(2_000)
        greedy = GreedySelection()
        for graph in (before, after):
            crawls = opic.state_.crawls
            while opic.state_.crawls < crawls + 10 * 2_000:
                opic.crawl(graph, greedy.select(opic.state_.cash[:-1], 100))
        reference = pagerank(after).scores
        errors[name] = np.mean(np.abs(opic.importance() / reference - 1.0))
    assert errors["interpolation"] < errors["full"] / 2, errors
    assert errors["variable"] < errors["full"] / 2, errors


# --- selection and synthetic graphs ----------------------------------------------------------


def test_selection_strategies() -> None:
    cash = np.array([0.1, 0.5, 0.0, 0.3, 0.1])
    assert sorted(GreedySelection().select(cash, 2).tolist()) == [1, 3]
    assert GreedySelection().select(cash, 9).tolist() == [0, 1, 2, 3, 4]
    cycle = CycleSelection()
    assert [cycle.select(cash, 2).tolist() for _ in range(3)] == [[0, 1], [2, 3], [4, 0]]
    picked = RandomSelection(seed=1).select(cash, 4)
    assert len(set(picked.tolist())) == 4
    assert np.array_equal(picked, RandomSelection(seed=1).select(cash, 4))


def test_power_law_graph_is_seeded_and_heavy_tailed() -> None:
    graph = power_law_graph(20_000, 160_000, seed=3)
    again = power_law_graph(20_000, 160_000, seed=3)
    assert np.array_equal(graph.indptr, again.indptr)
    assert np.array_equal(graph.indices, again.indices)
    assert 120_000 < graph.n_links + graph.duplicates_dropped <= 160_000 * 1.02
    in_degree = np.bincount(graph.indices, minlength=20_000)
    assert in_degree.max() > 50 * in_degree.mean()  # a heavy tail, not a Poisson graph
    assert graph.out_degree.max() > 10 * graph.out_degree.mean()


def test_change_in_degrees_doubles_or_halves_the_chosen_pages() -> None:
    graph = power_law_graph(5_000, 50_000, seed=4)
    changed_graph, changed = change_in_degrees(graph, 0.1, np.random.default_rng(4))
    assert changed.size == 500
    before = np.bincount(graph.indices, minlength=5_000)
    after = np.bincount(changed_graph.indices, minlength=5_000)
    untouched = np.setdiff1d(np.arange(5_000), changed)
    busy = changed[before[changed] >= 20]
    ratio = after[busy] / before[busy]
    assert np.all((ratio > 1.5) | (ratio < 0.7))
    assert np.mean(after[untouched] == before[untouched]) > 0.9


def test_the_paper_experiments_reproduce_their_ordering_at_small_scale() -> None:
    result = convergence_experiment(3_000, 24_000, multiples=(1, 5), batch_share=0.01, seed=2)
    assert set(result.errors) == {"random", "cycle", "greedy", "power iteration"}
    for name, errors in result.errors.items():
        assert errors[1] < errors[0], name  # more crawling, less error
    assert result.top_errors["greedy"][1] < result.top_errors["cycle"][1]
    assert result.top_errors["greedy"][1] < result.top_errors["random"][1]
    windows = window_experiment(
        2_000, 16_000, change_rates=(0.0, 0.05), measures=(4,), sizes=(4.0,), crawls=4, seed=2
    )
    assert windows.change_rates == (0.0, 0.05)
    full, interpolation = windows.errors["full history"], windows.errors["interpolation 4 G"]
    assert interpolation[1] < full[1]

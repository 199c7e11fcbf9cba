"""Estimating from the store: evidence streamed in chunks, estimates written back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import select

from estimators.buckets import BucketScale, bucket_aggregates
from service.pipeline import (
    ProbeSettings,
    aggregates_from_store,
    answer_groups,
    estimate_from_store,
)
from store import Database, FetchResult, LeasePolicy, LeaseQueue, add_pages
from store.estimates import iter_fetch_chunks, sample_fetch_chunk
from store.models import URGENT_REQUESTS, Page
from store.types import URGENT_DUE
from tests.conftest import T0, orm_all


def _crawl_history(db: Database, pages: int, visits: int, changes_every: dict[int, int]) -> None:
    """Fetch every page daily; page k changes on every ``changes_every[k]``-th visit."""
    kinds = {k: ("ok", 200, changes_every.get(k, 0)) for k in range(pages)}
    _crawl_answers(db, kinds, visits)


def test_estimates_are_written_back_chunk_by_chunk(db: Database) -> None:
    changes_every = {0: 1, 1: 2, 2: 5, 3: 0}  # daily, every other day, every 5th, never
    _crawl_history(db, pages=5, visits=11, changes_every=changes_every)
    summary = estimate_from_store(db, chunk_pages=2)  # three chunks
    assert summary.pages == 5 and summary.fetches == 55
    pages = {int(p.url.rsplit("p", 1)[1]): p for p in orm_all(db, select(Page))}
    rates = np.array([pages[k].rate for k in range(4)])
    assert np.all(np.diff(rates) < 0)  # more changes seen, higher rate
    for page in pages.values():
        assert page.rate_low <= page.rate <= page.rate_high
        assert page.estimator and page.estimated_at is not None
        expected = BucketScale().assign(np.array([page.rate]))[0]
        assert page.bucket == expected > 0


def test_a_store_is_estimated_as_its_fetches_stood_at_now(db: Database) -> None:
    changes_every = {0: 1, 1: 2, 2: 5, 3: 0}
    _crawl_history(db, pages=5, visits=11, changes_every=changes_every)

    def rates() -> list[float]:
        return [p.rate for p in sorted(orm_all(db, select(Page)), key=lambda p: p.url)]

    # the sixth visit (day 5) in, the later five left out: 6 fetches a page, as a store of
    # six visits gives (each page's first fetch's outcome ignored)
    then = estimate_from_store(db, now=T0 + timedelta(days=5, hours=12))
    assert (then.pages, then.fetches) == (5, 30)
    early = rates()
    whole = estimate_from_store(db)
    assert whole.fetches == 55 and rates() != early


def test_bucket_aggregates_from_the_store_match_one_pass(db: Database) -> None:
    changes_every = {0: 1, 1: 2, 2: 5, 3: 0}
    _crawl_history(db, pages=5, visits=6, changes_every=changes_every)
    add_pages(db, [("http://h.test/never", "http://h.test")], now=T0)  # never fetched
    estimate_from_store(db)
    now = T0 + timedelta(days=9)
    got = aggregates_from_store(db, period_days=2.0, now=now, chunk_pages=2)
    pages = [p for p in orm_all(db, select(Page)) if p.last_fetch_at is not None]
    elapsed = [(now - p.last_fetch_at).total_seconds() / 86_400 for p in pages]
    want = bucket_aggregates(
        [p.bucket for p in pages], [p.rate for p in pages], elapsed, period=2.0
    )
    assert got.new_pages == 1
    np.testing.assert_array_equal(got.buckets.pages, want.pages)
    for name in ("mean_rate", "change_fraction", "obsolete"):
        np.testing.assert_allclose(
            getattr(got.buckets, name), getattr(want, name), rtol=1e-12, equal_nan=True
        )
    assert got.buckets.pages.sum() == 5 and np.nansum(got.buckets.obsolete) > 0


def test_plan_rates_are_written_beside_the_estimates_and_bucket_the_pages(db: Database) -> None:
    """With a plan budget the nightly run stores each page's Bayes-equivalent rate and buckets
    the page by it; the estimates stay what they were; without one they are cleared."""
    changes_every = {k: 1 for k in range(8)} | {k: 2 for k in range(8, 12)} | {12: 5}
    _crawl_history(db, pages=16, visits=11, changes_every=changes_every)
    estimate_from_store(db, chunk_pages=6)
    before = {p.id: p.rate for p in orm_all(db, select(Page))}
    # two crawls a day for 16 pages: about one visit a week each
    estimate_from_store(db, chunk_pages=6, plan_budget=2.0)
    pages = {int(p.url.rsplit("p", 1)[1]): p for p in orm_all(db, select(Page))}
    assert {p.id: p.rate for p in pages.values()} == before
    for page in pages.values():
        assert page.plan_rate is not None and page.plan_rate > 0
        assert page.bucket == BucketScale().assign(np.array([page.plan_rate]))[0]
    # seen changed at every daily visit: most such pages change many times a day, worth no
    # crawl at this budget, so the plan takes them above the knee their estimate sits at
    for k in range(8):
        assert pages[k].plan_rate > pages[k].rate
    got = aggregates_from_store(db, period_days=1.0, now=T0 + timedelta(days=12))
    for bucket in {p.bucket for p in pages.values()}:
        mine = [p.plan_rate for p in pages.values() if p.bucket == bucket]
        assert got.buckets.mean_rate[bucket] == pytest.approx(np.mean(mine), rel=1e-9)
    estimate_from_store(db, chunk_pages=6)
    for page in orm_all(db, select(Page)):
        assert page.plan_rate is None
        assert page.bucket == BucketScale().assign(np.array([page.rate]))[0]


def test_pages_fetched_once_are_planned_on_the_prior(db: Database) -> None:
    """A page fetched once with no date has no estimate; with a plan budget it gets the
    prior's Bayes-equivalent rate (one rate for all such pages: nothing tells them apart)
    and that rate's bucket, and the aggregates plan it there; without one it is bucket 0."""
    changes_every = {k: 1 for k in range(6)} | {k: 4 for k in range(6, 12)}
    _crawl_history(db, pages=12, visits=9, changes_every=changes_every)
    later = T0 + timedelta(days=9)
    add_pages(db, [(f"http://h.test/n{k}", "http://h.test") for k in range(3)], now=later)
    (lease,) = LeaseQueue(db, LeasePolicy(max_urls=15, max_urls_per_host=15)).lease(
        "w", now=later + timedelta(minutes=1)
    )
    assert len(lease.pages) == 15
    results = [
        FetchResult(
            leased.page_id,
            later + timedelta(minutes=1),
            "ok",
            200,
            changed=None if "/n" in leased.url else False,
            next_due_at=later + timedelta(days=1),
        )
        for leased in lease.pages
    ]
    LeaseQueue(db, LeasePolicy()).finish(lease.lease_id, results, now=later)
    estimate_from_store(db, chunk_pages=5, plan_budget=3.0)
    once = [p for p in orm_all(db, select(Page)) if "/n" in p.url]
    assert [p.rate for p in once] == [None] * 3
    rates = {p.plan_rate for p in once}
    assert len(rates) == 1 and next(iter(rates)) > 0
    (bucket,) = {p.bucket for p in once}
    assert bucket == BucketScale().assign(np.array(list(rates)))[0] > 0
    got = aggregates_from_store(db, period_days=1.0, now=later + timedelta(days=1))
    assert got.new_pages == 0 and got.buckets.pages.sum() == 15
    assert got.buckets.pages[0] == 0 and got.buckets.pages[bucket] >= 3
    estimate_from_store(db, chunk_pages=5)
    once = [p for p in orm_all(db, select(Page)) if "/n" in p.url]
    assert [(p.plan_rate, p.bucket) for p in once] == [(None, 0)] * 3
    assert aggregates_from_store(db, period_days=1.0).buckets.pages[0] == 3


def _estimated(db: Database) -> dict[str, tuple[object, ...]]:
    columns = ("rate", "rate_low", "rate_high", "plan_rate", "bucket", "estimator")
    return {p.url: tuple(getattr(p, c) for c in columns) for p in orm_all(db, select(Page))}


def test_the_estimates_do_not_depend_on_the_chunks_nor_on_the_first_pages(db: Database) -> None:
    """The population's fits (the estimators' prior, the Bayes plan's prior and price) come
    from a sample of the whole store, not from its first chunk: here the first pages found
    change every day and the later ones seldom, and the store estimated four pages a chunk
    gives exactly what one chunk of all of it gives, pages fetched once included."""
    fast = {k: 1 for k in range(8)}
    slow = {k: 6 for k in range(8, 30)}
    _crawl_history(db, pages=30, visits=9, changes_every=fast | slow)
    later = T0 + timedelta(days=9)
    add_pages(db, [(f"http://h.test/n{k}", "http://h.test") for k in range(4)], now=later)
    (lease,) = LeaseQueue(db, LeasePolicy(max_urls=40, max_urls_per_host=40)).lease(
        "w", now=later + timedelta(minutes=1)
    )
    results = [
        FetchResult(leased.page_id, later + timedelta(minutes=1), "ok", 200, changed=None)
        for leased in lease.pages
        if "/n" in leased.url
    ]
    LeaseQueue(db, LeasePolicy()).finish(lease.lease_id, results, now=later)
    estimate_from_store(db, chunk_pages=1000, plan_budget=6.0)
    whole = _estimated(db)
    estimate_from_store(db, chunk_pages=4, sample_pages=1000, plan_budget=6.0)
    assert _estimated(db) == whole
    # a sample of every fourth fetched page still speaks for the store: the pages fetched
    # once get a plan rate within 15 % of the whole store's (10 % below it), where a fit on
    # the first chunk alone (four pages changing daily) put it 26 % below
    estimate_from_store(db, chunk_pages=4, sample_pages=10, plan_budget=6.0)
    once = [url for url in whole if "/n" in url]
    plan_rate = whole[once[0]][3]
    assert isinstance(plan_rate, float)
    assert _estimated(db)[once[0]][3] == pytest.approx(plan_rate, rel=0.15)


def test_the_sample_is_spread_over_the_store(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sample_fetch_chunk``: every k-th fetched page by id (never-fetched pages and
    duplicates left out, as the chunks leave them), each page's fetches in time order, read
    in batches of ids; None when the store fits in one chunk; a sample of no page refused."""
    import store.estimates as estimates_module
    from store.estimates import iter_fetch_chunks, sample_fetch_chunk
    from store.models import PAGES

    _crawl_history(db, pages=20, visits=3, changes_every={0: 1})
    add_pages(db, [("http://h.test/never", "http://h.test")], now=T0)
    with db.write() as conn:
        first = conn.execute(select(PAGES.c.id).order_by(PAGES.c.id)).scalars().first()
        conn.execute(PAGES.update().where(PAGES.c.id == first).values(status="duplicate"))
    monkeypatch.setattr(estimates_module, "_SAMPLE_BATCH", 2)
    assert sample_fetch_chunk(db, pages=5, chunk_pages=21) is None
    sample = sample_fetch_chunk(db, pages=5, chunk_pages=20)
    assert sample is not None
    everything = [r for chunk in iter_fetch_chunks(db) for r in chunk.rows]
    ids = sorted({r[0] for r in everything})
    assert len(ids) == 19 and first not in ids
    assert sorted({r[0] for r in sample.rows}) == ids[::4]
    assert sample.rows == [r for r in everything if r[0] in set(ids[::4])]
    whole = sample_fetch_chunk(db, pages=100, chunk_pages=20)
    assert whole is not None and whole.rows == everything
    with pytest.raises(ValueError, match="at least one page"):
        sample_fetch_chunk(db, pages=0)


def test_a_sample_without_evidence_leaves_the_fits_to_the_chunks(db: Database) -> None:
    """A sample whose pages were all fetched once (no evidence) fits nothing; the chunks
    then fit the prior and the price as before, and every fetched page gets a plan rate."""
    _crawl_history(db, pages=12, visits=1, changes_every={})  # fetched once each
    later = T0 + timedelta(days=1)
    lease = LeaseQueue(db, LeasePolicy(max_urls=12, max_urls_per_host=12))
    for day in range(1, 8):  # pages 2 and 7 fetched daily a week more, the rest once
        now = later + timedelta(days=day)
        for leased_batch in lease.lease("w", now=now):
            done = [
                FetchResult(p.page_id, now, "ok", 200, changed=day % 2 == 0)
                for p in leased_batch.pages
                if p.url.endswith(("/p2", "/p7"))
            ]
            lease.finish(leased_batch.lease_id, done, now=now)
    estimate_from_store(db, chunk_pages=4, sample_pages=3, plan_budget=4.0)
    planned = [p.plan_rate for p in orm_all(db, select(Page))]
    assert len(planned) == 12 and all(r is not None and r > 0 for r in planned)


def test_pages_with_a_bucket_and_no_rate_are_counted_over_every_chunk(db: Database) -> None:
    """Fetched pages with a bucket but no rate >= 0 (NaN or negative), in several chunks: all
    counted, the first named, and no aggregate made of the rest."""
    from planner.model.instance import InstanceError
    from store.models import PAGES

    _crawl_history(db, pages=7, visits=3, changes_every={0: 1, 1: 2})
    estimate_from_store(db)
    with db.write() as conn:
        ids = sorted(conn.execute(select(PAGES.c.id).where(PAGES.c.bucket > 0)).scalars())
        assert len(ids) == 7
        conn.execute(PAGES.update().where(PAGES.c.id.in_([ids[1], ids[5]])).values(rate=None))
        conn.execute(PAGES.update().where(PAGES.c.id == ids[6]).values(rate=-1.0))
    for chunk in (2, 3, 100):
        with pytest.raises(InstanceError) as error:
            aggregates_from_store(
                db, period_days=1.0, now=T0 + timedelta(days=4), chunk_pages=chunk
            )
        assert str(error.value).startswith(
            f"3 fetched pages have a change-rate bucket but no rate >= 0 (page id {ids[1]}, "
        )
    with db.write() as conn:
        conn.execute(PAGES.update().where(PAGES.c.id.in_(ids[5:])).values(rate=0.5))
    with pytest.raises(InstanceError, match=r"^1 fetched page has a change-rate bucket"):
        aggregates_from_store(db, period_days=1.0, now=T0 + timedelta(days=4), chunk_pages=2)


def test_prefetched_chunks_keep_order_and_raise_reader_errors() -> None:
    from service.pipeline import _prefetched

    assert list(_prefetched(iter(range(10)))) == list(range(10))

    def broken() -> Iterator[int]:
        yield 1
        raise RuntimeError("database went away")

    got = []
    with pytest.raises(RuntimeError, match="database went away"):
        for item in _prefetched(broken()):
            got.append(item)
    assert got == [1]
    early = _prefetched(iter(range(1000)))
    assert next(early) == 0
    early.close()  # stops the reader without reading the rest


def _crawl_answers(
    db: Database,
    kinds: dict[int, tuple[str, int, int]],
    visits: int,
    failing: frozenset[int] = frozenset(),
    changes: Callable[[int, int], bool] | None = None,
) -> None:
    """Fetch every page of ``kinds`` (page -> (status, HTTP status, changes every k-th
    visit; 0: never)) daily; the pages ``failing`` answer 503 at the last visit; with
    ``changes`` (page, visit -> changed since the last visit), it says instead."""
    add_pages(db, [(f"http://h.test/p{k}", "http://h.test") for k in kinds], now=T0)
    queue = LeaseQueue(db, LeasePolicy(max_urls=len(kinds), max_urls_per_host=len(kinds)))
    for visit in range(visits):
        now = T0 + timedelta(days=visit, minutes=1)
        (lease,) = queue.lease("w", now=now)
        results = []
        for leased in lease.pages:
            k = int(leased.url.rsplit("p", 1)[1])
            status, code, every = kinds[k]
            changed = None if visit == 0 else bool(every and visit % every == 0)
            if changes is not None and visit > 0:
                changed = changes(k, visit)
            if k in failing and visit == visits - 1:
                status, code, changed = "error", 503, None
            due = now + timedelta(days=1) - timedelta(minutes=2)
            results.append(FetchResult(leased.page_id, now, status, code, changed, next_due_at=due))
        queue.finish(lease.lease_id, results, now=now)


@pytest.mark.parametrize("chunk_pages", [500, 50], ids=["one-chunk", "sampled"])
def test_redirects_and_gone_pages_are_planned_on_a_prior_of_their_own(
    db: Database, chunk_pages: int
) -> None:
    """Redirects and gone pages seen unchanged have the evidence of a page seen unchanged,
    but pooled with the other redirects (gone pages), none of which ever changed, they are
    planned as slower: the population's prior, where nearly every page changes, does not pull
    them up to the pages' rates. The fits come from the store itself or, past one chunk, from
    the sample; the answers travel with both."""
    kinds = {k: ("ok", 200, (1, 2, 4, 8)[k % 4]) for k in range(120)}  # pages that change
    kinds |= {k: ("ok", 200, 0) for k in range(120, 122)}  # pages never seen changed
    kinds |= {k: ("redirect", 301, 0) for k in range(122, 162)}
    kinds |= {k: ("gone", 404, 0) for k in range(162, 182)}
    _crawl_answers(db, kinds, visits=10)
    estimate_from_store(db, chunk_pages=chunk_pages, sample_pages=100, plan_budget=20.0)
    pages = {int(p.url.rsplit("p", 1)[1]): p for p in orm_all(db, select(Page))}
    plan = {k: pages[k].plan_rate for k in kinds}
    assert all(rate is not None and rate > 0 for rate in plan.values())
    unchanged_page = min(plan[120], plan[121])
    # the same evidence, a prior of their own: slower than an unchanged page, the more so the
    # more pages the group has
    assert max(plan[k] for k in range(122, 162)) < unchanged_page / 2
    assert max(plan[k] for k in range(162, 182)) < unchanged_page
    # the estimates are the estimators' own, whatever the answer
    assert pages[130].rate == pytest.approx(pages[121].rate, rel=1e-6)


def test_a_chunk_names_each_page_by_its_last_answer(db: Database) -> None:
    """A chunk (and a sample) carries the HTTP status of the last answered fetch of its
    redirects, gone pages and pages whose last fetch failed: a redirect that answered 503
    last stays a redirect, a page that failed stays a page."""
    kinds = {0: ("ok", 200, 1), 1: ("redirect", 301, 0), 2: ("gone", 410, 0)}
    kinds |= {3: ("redirect", 302, 0), 4: ("ok", 200, 2), 5: ("ok", 304, 0)}
    _crawl_answers(db, kinds, visits=3, failing=frozenset({3, 4}))
    ids = {int(p.url.rsplit("p", 1)[1]): p.id for p in orm_all(db, select(Page))}
    statuses = {int(p.url.rsplit("p", 1)[1]): p.status for p in orm_all(db, select(Page))}
    assert statuses[3] == statuses[4] == "error"
    want = [(ids[1], 301), (ids[2], 410), (ids[3], 302), (ids[4], 200)]
    (chunk,) = iter_fetch_chunks(db)
    assert chunk.answers == want
    sample = sample_fetch_chunk(db, pages=6, chunk_pages=2)
    assert sample is not None and sample.answers == want
    pages = np.array(sorted(ids.values()))
    groups = answer_groups(pages, chunk.answers)
    assert dict(zip(pages.tolist(), groups.tolist(), strict=True)) == {
        ids[0]: 0,
        ids[1]: 1,
        ids[2]: 2,
        ids[3]: 1,
        ids[4]: 0,
        ids[5]: 0,
    }


@pytest.mark.parametrize("chunk_pages", [500, 40], ids=["one-chunk", "chunks"])
def test_pages_whose_rate_is_worth_learning_get_a_probe(db: Database, chunk_pages: int) -> None:
    """On a web whose rates spread over two decades around one change a day, fetched daily,
    the pages near the plan's cut-off rate are worth a probe: the best (no more than the
    limit) are marked, with a delay no shorter than the shortest (chunk by chunk, the one
    the first chunk chose), and queued as urgent probes. The slowest pages, known to be
    worth their crawls, get none. A run with a limit of 0 only clears the marks."""
    rng = np.random.default_rng(3)
    rate = np.exp(rng.uniform(np.log(0.1), np.log(10.0), 160))  # changes a day
    seen = rng.random((160, 8)) < -np.expm1(-rate[:, None])
    kinds = {k: ("ok", 200, 0) for k in range(160)}
    _crawl_answers(db, kinds, visits=8, changes=lambda k, visit: bool(seen[k, visit]))
    settings = ProbeSettings(horizon_days=365.0, shortest_days=0.01, limit=12)
    summary = estimate_from_store(
        db, plan_budget=20.0, probes=settings, chunk_pages=chunk_pages, sample_pages=chunk_pages
    )
    pages = {int(p.url.rsplit("p", 1)[1]): p for p in orm_all(db, select(Page))}
    marked = sorted(k for k, p in pages.items() if p.probe_delay is not None)
    assert len(marked) == summary.probes == summary.probes_queued == 12
    assert rate[marked].min() > 0.2  # the slowest decade's pages: nothing worth learning
    assert all(pages[k].probe_delay >= 0.01 for k in marked)  # type: ignore[operator]
    assert len({pages[k].probe_delay for k in marked}) == 1
    with db.read() as conn:
        requests = conn.execute(select(URGENT_REQUESTS.c.page_id, URGENT_REQUESTS.c.source))
        assert sorted(requests.tuples()) == sorted((pages[k].id, "probe") for k in marked)
    cleared = estimate_from_store(db, plan_budget=20.0, probes=replace(settings, limit=0))
    assert cleared.probes == 0
    assert all(p.probe_delay is None for p in orm_all(db, select(Page)))


@pytest.mark.parametrize("chunk_pages", [500, 40], ids=["one-chunk", "chunks"])
def test_pages_past_the_probes_limit_get_a_follow_up(db: Database, chunk_pages: int) -> None:
    """The same web with follow-ups on and a limit of 4 probes: the 4 best are queued; the
    other pages whose lesson pays for a crawl (the probes past the limit among them) are
    marked for a follow-up, no more than 30 % of the fetched pages: marked with the probes'
    delay but left out of the urgent lane, no crawl charged yet. A run with neither clears
    every mark."""
    rng = np.random.default_rng(3)
    rate = np.exp(rng.uniform(np.log(0.1), np.log(10.0), 160))  # changes a day
    seen = rng.random((160, 8)) < -np.expm1(-rate[:, None])
    kinds = {k: ("ok", 200, 0) for k in range(160)}
    _crawl_answers(db, kinds, visits=8, changes=lambda k, visit: bool(seen[k, visit]))
    settings = ProbeSettings(horizon_days=365.0, shortest_days=0.01, limit=4, follow_ups=True)
    summary = estimate_from_store(
        db, plan_budget=20.0, probes=settings, chunk_pages=chunk_pages, sample_pages=chunk_pages
    )
    pages = {int(p.url.rsplit("p", 1)[1]): p for p in orm_all(db, select(Page))}
    marked = {k for k, p in pages.items() if p.probe_delay is not None}
    with db.read() as conn:
        rows = conn.execute(select(URGENT_REQUESTS.c.page_id, URGENT_REQUESTS.c.source))
        requests = set(rows.tuples())
    probed = {k for k, p in pages.items() if (p.id, "probe") in requests}
    followed = marked - probed
    assert len(probed) == summary.probes_queued == 4
    # what pays for two crawls pays for one: the probes past the limit are followed up
    assert len(followed) >= 12 - 4
    assert len(followed) == summary.follow_ups == summary.follow_ups_marked
    assert 0 < len(followed) <= int(0.3 * 160)
    assert all(pages[k].next_due_at != URGENT_DUE for k in followed)  # not in the urgent lane
    assert all(pages[k].next_due_at == URGENT_DUE for k in probed)
    assert len({pages[k].probe_delay for k in marked}) == 1  # one delay: the probes'
    assert rate[sorted(followed)].min() > 0.2  # nothing to learn of the slowest decade
    cleared = estimate_from_store(
        db, plan_budget=20.0, probes=replace(settings, limit=0, follow_ups=False)
    )
    assert cleared.probes == cleared.follow_ups == 0
    assert all(p.probe_delay is None for p in orm_all(db, select(Page)))

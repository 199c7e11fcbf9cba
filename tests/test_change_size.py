""" "Changed" can mean "changed by at least X": the change's size, read from the signatures.

A fetch's signature keeps a SimHash and a word count beside its exact hash
(:mod:`crawler.signature`). From two of them :func:`change_share` estimates the share of
the main text that changed; with ``estimate.min_change`` set, the estimate counts smaller
changes as none (:func:`changes_at_least`), in the store's estimate (both backends) and in a
fetch table's (``crawlplan estimate -i``).
"""

from __future__ import annotations

import math
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select
from typer.testing import CliRunner, Result

from crawler.signature import change_share, change_size, changes_at_least, page_signature
from service.cli.app import app
from service.nightly import ConfigError, NightlySettings
from service.pipeline import estimate_from_store
from store import Database, add_pages
from store.models import OBSERVATIONS, PAGES

T0 = datetime(2026, 9, 1, tzinfo=UTC)

#: 400 words of a page, seeded: the same text every run.
_RNG = random.Random(5)
_VOCABULARY = [f"{a}{b}" for a in ("re", "con", "pro", "de", "in") for b in ("lat", "ver", "sum")]
BASE = [_RNG.choice(_VOCABULARY) + _RNG.choice("aeiou") for _ in range(400)]


def _signature(words: list[str]) -> str:
    return page_signature(" ".join(words))


# --- the share, in closed form -------------------------------------------------------------


def test_the_share_of_an_unchanged_or_rewritten_text() -> None:
    assert change_share(0, 500, 500) == 0.0
    assert change_share(32, 500, 500) == pytest.approx(1.0)  # orthogonal shingle vectors: all of it
    assert change_share(64, 500, 500) == pytest.approx(1.0)  # complementary: capped, not 2
    assert change_share(0, 0, 0) == 0.0


def test_the_share_reads_the_larger_of_the_simhash_and_the_word_counts() -> None:
    # 8 bits differ: 1 - cos(pi 8 / 64) of the shingles replaced
    assert change_share(8, 500, 500) == pytest.approx(1 - math.cos(math.pi / 8))
    assert change_share(8, 500, 500) == pytest.approx(0.07612, abs=1e-5)
    # 100 words appended to 1,000 that barely moved the SimHash: 100 / 1,100 of the text
    assert change_share(1, 1_000, 1_100) == pytest.approx(100 / 1_100)
    assert change_share(1, 1_100, 1_000) == pytest.approx(100 / 1_100)  # and removed


def test_the_share_of_real_edits_of_one_text() -> None:
    same = change_size(_signature(BASE), _signature(BASE))
    assert same is not None and same.share == 0.0 and same.bits == 0
    appended = change_size(_signature(BASE), _signature(BASE + BASE[:40]))
    assert appended is not None and appended.words == 40
    assert appended.share == pytest.approx(40 / 440, abs=0.02)
    # a quarter of the text rewritten in place: the word count stays, the SimHash moves
    rewritten = BASE[:300] + [w[::-1] for w in BASE[300:]]
    size = change_size(_signature(BASE), _signature(rewritten))
    assert size is not None and size.words == 0 and 0.1 < size.share < 0.5
    # one word of 400: a change, and a small one
    typo = [*BASE[:200], "typo", *BASE[201:]]
    small = change_size(_signature(BASE), _signature(typo))
    assert small is not None and small.share < 0.02


# --- which changes count ----------------------------------------------------------------------


def test_changes_below_the_share_count_as_none_per_page() -> None:
    a, b = _signature(BASE), _signature(BASE + BASE[:200])  # a third of the text added
    typo = _signature([*BASE[:10], "typo", *BASE[11:]])
    pages = [1, 1, 1, 1, 1, 2, 2, 2]
    changed = [None, True, False, True, True, None, True, True]
    # page 1: a, typo (small), 304 (no signature: typo stays the reference), a (small), b
    # page 2: its first fetch compares with nothing; then an unreadable change, then a big one
    signatures = [a, typo, None, a, b, b, "0" * 32, a]
    flags, demoted = changes_at_least(pages, changed, signatures, 0.05)
    assert flags == [None, False, False, False, True, None, True, True]
    assert demoted == 2
    # the first fetch of page 2 never compares with page 1's last version
    flags, _ = changes_at_least([1, 2], [None, True], [a, typo], 0.05)
    assert flags == [None, True]


_FLAGS = st.sampled_from([None, True, False])
_SIGNATURES = st.sampled_from(
    [None, _signature(BASE), _signature(BASE[:390]), _signature(BASE[:100]), "f" * 40]
)


@given(
    st.lists(st.tuples(st.integers(1, 3), _FLAGS, _SIGNATURES), max_size=30),
    st.floats(0, 1),
)
def test_a_threshold_only_turns_changes_into_none(
    rows: list[tuple[int, bool | None, str | None]], share: float
) -> None:
    rows.sort(key=lambda r: r[0])
    pages, changed, signatures = (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 3
    flags, demoted = changes_at_least(pages, changed, signatures, share)
    assert len(flags) == len(changed)
    assert demoted == sum(c is True and f is False for c, f in zip(changed, flags, strict=True))
    for before, after in zip(changed, flags, strict=True):
        assert after == before or (before is True and after is False)
    assert changes_at_least(pages, changed, signatures, 0.0) == (changed, 0)


# --- the store's estimate, both backends ------------------------------------------------------


def _fetches(db: Database, url: str, versions: list[str], *, dated: bool) -> None:
    """A page fetched daily, one version a fetch, each fetch compared with the one before
    (and, when ``dated``, a Last-Modified an hour before each fetch: every version is new)."""
    with db.read() as conn:
        page_id = conn.execute(select(PAGES.c.id).where(PAGES.c.url == url)).scalar_one()
    rows = []
    for k, version in enumerate(versions):
        at = T0 + timedelta(days=k)
        changed = None if k == 0 else version != versions[k - 1]
        rows.append(
            {
                "page_id": page_id,
                "kind": "fetch",
                "fetched_at": at,
                "recorded_at": at,
                "http_status": 200,
                "changed": changed,
                "signature": version,
                "last_modified": at - timedelta(hours=1) if dated else None,
            }
        )
    db.run_write(lambda conn: conn.execute(OBSERVATIONS.insert(), rows))


def test_the_store_estimate_counts_only_changes_of_the_set_size(db: Database) -> None:
    """Two pages fetched daily for 12 days, changed at every fetch: /typos by one word each
    time (its dates honest), /rewrites by a third of its text. With estimate.min_change =
    0.05 /typos is estimated as a page that never changed, and /rewrites keeps its changes."""
    origin = "http://size.test"
    add_pages(db, [(origin + "/typos", origin), (origin + "/rewrites", origin)], now=T0)
    typos = [_signature([*BASE[:k], f"typo{k}", *BASE[k + 1 :]]) for k in range(12)]
    rewrites = [_signature(BASE[k * 30 :] + BASE[: k * 30][::-1]) for k in range(12)]
    _fetches(db, origin + "/typos", typos, dated=True)
    _fetches(db, origin + "/rewrites", rewrites, dated=False)

    def rates() -> dict[str, tuple[float, str]]:
        with db.read() as conn:
            rows = conn.execute(select(PAGES.c.url, PAGES.c.rate, PAGES.c.estimator)).all()
        return {url.removeprefix(origin): (rate, name) for url, rate, name in rows}

    every = estimate_from_store(db)
    assert every.small_changes == 0
    before = rates()
    assert before["/typos"][1].startswith("last_modified")  # its honest dates are read
    sized = estimate_from_store(db, min_change=0.05)
    assert sized.small_changes == 11 and sized.fetches == every.fetches
    after = rates()
    assert not any(name.startswith("last_modified") for _, name in after.values())
    assert after["/typos"][0] < before["/typos"][0] / 10
    # every change of /rewrites still counts (the 11 demoted are /typos'); its estimate
    # moves only with the prior the two pages share
    assert after["/rewrites"][0] > 10 * after["/typos"][0]


def test_a_share_outside_0_to_1_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"estimate\.min_change must be a share from 0 to 1"):
        NightlySettings(min_change=1.5)


# --- crawlplan estimate -i ---------------------------------------------------------------------


def _run(*args: str, cwd: Path, share: str) -> Result:
    """``crawlplan ARGS`` in ``cwd`` with ``$CRAWLPLAN_MIN_CHANGE`` = ``share``."""
    env = {k: v for k, v in os.environ.items() if k.startswith("CRAWLPLAN_")}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for name in env:
            patch.delenv(name)
        return CliRunner().invoke(app, list(args), env={"CRAWLPLAN_MIN_CHANGE": share})


def test_a_fetch_table_gets_the_threshold_from_its_change_size_column(tmp_path: Path) -> None:
    rows = ["page,fetched_at,changed,change_size"]
    for k in range(10):
        rows.append(f"http://a.test/1,{1.0 + k},{'' if k == 0 else 1},{'' if k == 0 else 0.01}")
    (tmp_path / "obs.csv").write_text("\n".join(rows) + "\n")
    estimated = {}
    for share in ("0", "0.05"):
        proc = _run("estimate", "-i", "obs.csv", "-o", "r.csv", cwd=tmp_path, share=share)
        assert proc.exit_code == 0, proc.output
        header, row = (tmp_path / "r.csv").read_text().splitlines()
        estimated[share] = float(row.split(",")[header.split(",").index("rate")])
    assert estimated["0.05"] < estimated["0"] / 10
    # without the column, or with a size that is not a share: one line, exit 2, nothing written
    (tmp_path / "plain.csv").write_text("page,fetched_at,changed\nhttp://a.test/1,1,\n")
    (tmp_path / "bad.csv").write_text(
        "page,fetched_at,changed,change_size\nhttp://a.test/1,1,,\nhttp://a.test/1,2,1,12\n"
    )
    for name, needle in (("plain.csv", "no change_size column"), ("bad.csv", "line 3")):
        proc = _run("estimate", "-i", name, "-o", "x.csv", cwd=tmp_path, share="0.05")
        lines = proc.stderr.strip().splitlines()
        assert proc.exit_code == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
        assert isinstance(proc.exception, SystemExit)  # no traceback, one line
        assert not (tmp_path / "x.csv").exists()
    proc = _run("config", cwd=tmp_path, share="2")
    assert proc.exit_code == 2 and "estimate.min_change" in proc.stderr, proc.stderr

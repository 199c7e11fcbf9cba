"""Quotas: whole pages, non-negative, totals rounded, capacity never exceeded (Hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from planner.cycle.quotas import crawl_fractions, integer_quotas, largest_remainder

plans = st.integers(1, 6).flatmap(
    lambda B: st.integers(1, 4).flatmap(
        lambda T: st.tuples(
            arrays(float, (B, T), elements=st.floats(0, 1e4)),
            arrays(float, (T,), elements=st.floats(0, 1e4)),
            arrays(float, (B, T), elements=st.floats(0.1, 5)),
            arrays(float, (T,), elements=st.floats(0.1, 5)),
            arrays(float, (T,), elements=st.floats(0, 1)),
        )
    )
)


@settings(max_examples=200, deadline=None)
@given(plans)
def test_quotas_are_whole_nonnegative_and_within_capacity(plan: tuple) -> None:
    x, z, c, d, slack = plan
    capacity = (c * x).sum(axis=0) + d * z + slack  # the plan fits, as a solver's plan does
    q = integer_quotas(x, z, c, d, capacity)
    assert q.old.dtype == np.int64 and q.new.dtype == np.int64
    assert (q.old >= 0).all() and (q.new >= 0).all()
    assert np.all((c * q.old).sum(axis=0) + d * q.new <= capacity + 1e-9)
    # Each quota is within one page of the plan.
    assert np.all(np.abs(q.old - x) < 1) and np.all(np.abs(q.new - z) < 1)
    totals = x.sum(axis=0) + z
    got = q.old.sum(axis=0) + q.new
    # The total is the plan's total rounded, unless rounding up would not fit in capacity.
    assert np.all((got == np.rint(totals)) | (got < np.rint(totals)))
    assert np.all(got >= np.floor(x).sum(axis=0) + np.floor(z))


@given(arrays(float, st.integers(1, 20), elements=st.floats(0, 100)))
def test_largest_remainder_hits_the_rounded_total(values: np.ndarray) -> None:
    total = int(np.clip(np.rint(values.sum()), np.floor(values).sum(), np.ceil(values).sum()))
    q = largest_remainder(values, total)
    assert q.sum() == total
    assert np.all(np.abs(q - values) < 1)


def test_largest_remainder_example() -> None:
    # Hamilton's method on 3 parties: 4.6, 3.3, 2.1 -> total 10 -> 5, 3, 2.
    assert largest_remainder(np.array([4.6, 3.3, 2.1]), 10).tolist() == [5, 3, 2]
    with pytest.raises(ValueError, match="not reachable"):
        largest_remainder(np.array([1.5]), 5)


def test_capacity_binding_takes_back_the_smallest_remainder() -> None:
    x = np.array([[1.6], [1.8]])
    z = np.array([0.65])
    q = integer_quotas(x, z, np.ones((2, 1)), np.ones(1), np.array([4.0]))
    assert q.old[:, 0].tolist() == [1, 2] and q.new.tolist() == [1]  # 4 pages fit
    q = integer_quotas(x, z, np.ones((2, 1)), np.ones(1), np.array([3.5]))
    assert q.old[:, 0].tolist() == [1, 2] and q.new.tolist() == [0]  # 0.65 went back


def test_limits_and_fractions() -> None:
    x = np.array([[5.0, 2.0]])
    q = integer_quotas(
        x,
        np.array([3.7, 0.2]),
        np.ones((1, 2)),
        np.ones(2),
        np.array([100.0, 100.0]),
        available=np.array([[4.5, 10.0]]),
        new_available=np.array([2.0, 5.0]),
    )
    assert q.old.tolist() == [[4, 2]] and q.new.tolist() == [2, 0]
    f = crawl_fractions(x, np.array([10.0]), np.array([[10.0, 20.0]]))
    np.testing.assert_allclose(f, [[0.5, 0.2]])


def test_limits_a_hair_below_zero_give_no_negative_quota() -> None:
    # Ipopt may return n[t-1] = -1e-9 (inside its tolerance): the floor is 0, not -1.
    q = integer_quotas(
        np.array([[2.0]]),
        np.array([0.0]),
        np.ones((1, 1)),
        np.ones(1),
        np.array([5.0]),
        available=np.array([[-1e-9]]),
        new_available=np.array([-1e-9]),
    )
    assert q.old.tolist() == [[0]] and q.new.tolist() == [0]


def test_a_pool_a_hair_below_whole_is_the_whole_pool() -> None:
    """The solver returns 200 - 120 new pages as 79.99999: the quota is 80, not 79 (a crawl
    the capacity allows would be lost), and a pool a hair below 0 gives 0."""
    q = integer_quotas(
        np.array([[40.0]]),
        np.array([80.0]),
        np.ones((1, 1)),
        np.ones(1),
        np.array([120.0]),
        available=np.array([[100.0]]),
        new_available=np.array([79.9999929]),
    )
    assert q.new.tolist() == [80] and q.old.tolist() == [[40]]
    q = integer_quotas(
        np.array([[40.0]]),
        np.array([1e-8]),
        np.ones((1, 1)),
        np.ones(1),
        np.array([120.0]),
        new_available=np.array([-1e-9]),
    )
    assert q.new.tolist() == [0]

"""The data of one WebFountain planning instance, validated once, in the file interface's keys.

:class:`CrawlInstance` holds everything the model in :mod:`planner.model.webfountain` needs except
the objective weights (:mod:`planner.model.weights`). Arrays are float64, read-only, already
broadcast to full shape: ``[B]`` per bucket, ``[T]`` per period, ``[B, T]`` per bucket and
period. Pages are counts of pages, costs and capacity are seconds of crawl time.

:meth:`CrawlInstance.from_mapping` reads the keys of ``crawlplan solve INSTANCE.json``::

    periods, buckets            T and B (integers >= 1)
    b0 [B], y0 [B], n0          pages per bucket, obsolete pages per bucket, new uncrawled pages
    change_rate [B]             changes per page per period, or
    a [B][T]                    fraction of a bucket's pages that change in a period, in [0, 1]
    capacity [T]                seconds of crawling available per period (scalar: every period)
    crawl_cost                  seconds per old-page crawl: scalar, [B] or [B][T]
    new_crawl_cost              seconds per new-page crawl: scalar or [T]
    oldnwt                      new pages found per old-page crawl: scalar, [B] or [B][T]
    newnwt                      new pages found per new-page crawl: scalar or [T]
    nconst                      new pages brought to the crawler's attention per period
    p [B] (optional)            share of crawled new pages that join each bucket (default b0 /
                                sum b0); normalized to sum 1

Every violation raises :class:`InstanceError` naming the key and what would fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "MAX_MODEL_CELLS",
    "CrawlInstance",
    "InstanceError",
    "change_fraction",
    "check_model_size",
]

#: The most bucket-period cells (B x T) an instance may have. The model holds several
#: variables and constraints per cell, about 16 kB of Pyomo and Ipopt memory each (255 x 100
#: built in 400 MB), so 100,000 cells is about 1.6 GB: 255 buckets over 392 periods, against
#: 255 x 14 by default. Checked before any B x T array is built, so that a typo such as
#: ``periods: 100000000`` is one clear error rather than a 190 GiB allocation.
MAX_MODEL_CELLS = 100_000


def check_model_size(buckets: int, periods: int) -> None:
    """Raise :class:`InstanceError` if a B x T model is too large to build on one machine."""
    cells = buckets * periods
    if cells > MAX_MODEL_CELLS:
        raise InstanceError(
            f"periods: {buckets:,} buckets x {periods:,} periods is {cells:,} model cells, "
            f"more than the {MAX_MODEL_CELLS:,} one machine can build; use fewer periods "
            f"(at most {max(MAX_MODEL_CELLS // buckets, 1):,} with {buckets:,} buckets) or "
            "longer ones"
        )


_REQUIRED = (
    "periods",
    "buckets",
    "b0",
    "y0",
    "n0",
    "capacity",
    "crawl_cost",
    "new_crawl_cost",
    "oldnwt",
    "newnwt",
    "nconst",
)


class InstanceError(ValueError):
    """An instance key is missing, has the wrong shape or holds an impossible value."""


def change_fraction(change_rate: np.ndarray, periods: int) -> np.ndarray:
    """Fraction of pages that change in one period under a Poisson process.

    Parameters
    ----------
    change_rate : ndarray, shape (B,)
        Changes per page per period (lambda * period length), >= 0.
    periods : int
        T, the number of periods.

    Returns
    -------
    ndarray, shape (B, T)
        ``1 - exp(-change_rate)`` repeated over the periods.
    """
    a = -np.expm1(-np.asarray(change_rate, dtype=float))
    return np.repeat(a[:, None], periods, axis=1)


def _frozen(array: np.ndarray) -> np.ndarray:
    out = np.array(array, dtype=float)
    out.setflags(write=False)
    return out


def _as_array(data: Mapping[str, Any], key: str) -> np.ndarray:
    try:
        return np.asarray(data[key], dtype=float)
    except (TypeError, ValueError):
        raise InstanceError(f"{key}: expected numbers, got {data[key]!r}") from None


def _shaped(value: np.ndarray, key: str, shapes: Mapping[str, tuple[int, ...]]) -> np.ndarray:
    """Broadcast ``value`` to the last (full) shape in ``shapes`` if it matches one of them."""
    full = list(shapes.values())[-1]
    for shape in shapes.values():
        if value.shape == shape:
            if len(shape) == 1 and len(full) == 2 and shape[0] == full[0]:
                return np.broadcast_to(value[:, None], full).copy()
            return np.broadcast_to(value, full).copy()
    allowed = " or ".join(shapes)
    raise InstanceError(f"{key}: expected {allowed}, got an array of shape {list(value.shape)}")


def _check(value: np.ndarray, key: str, *, low: float = 0.0, high: float | None = None) -> None:
    if not np.all(np.isfinite(value)):
        raise InstanceError(f"{key}: every value must be a finite number")
    if np.any(value < low):
        where = np.argwhere(value < low)[0].tolist()
        raise InstanceError(f"{key}: value {value[tuple(where)]!r} at {where} is below {low}")
    if high is not None and np.any(value > high):
        where = np.argwhere(value > high)[0].tolist()
        raise InstanceError(f"{key}: value {value[tuple(where)]!r} at {where} is above {high}")


@dataclass(frozen=True)
class CrawlInstance:
    """One planning instance; see the module docstring for units. Build with ``from_mapping``.

    Attributes
    ----------
    buckets, periods : int
        B and T.
    b0, y0 : ndarray, shape (B,)
        Pages per bucket and obsolete pages per bucket at the start of the cycle.
    n0, nconst : float
        New uncrawled pages at the start; new pages discovered per period regardless of crawling.
    a : ndarray, shape (B, T)
        Fraction of a bucket's pages that change during a period, in [0, 1].
    capacity : ndarray, shape (T,)
        Seconds of crawling available per period.
    crawl_cost, oldnwt : ndarray, shape (B, T)
        Seconds per old-page crawl; new pages found per old-page crawl.
    new_crawl_cost, newnwt : ndarray, shape (T,)
        Seconds per new-page crawl; new pages found per new-page crawl.
    p : ndarray, shape (B,)
        Share of crawled new pages joining each bucket (sums to 1).
    """

    buckets: int
    periods: int
    b0: np.ndarray
    y0: np.ndarray
    n0: float
    a: np.ndarray
    capacity: np.ndarray
    crawl_cost: np.ndarray
    new_crawl_cost: np.ndarray
    oldnwt: np.ndarray
    newnwt: np.ndarray
    nconst: float
    p: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CrawlInstance:
        """Validate ``data`` (the instance file's keys) and return the instance.

        Raises
        ------
        InstanceError
            Naming the first bad key: missing, wrong shape, negative pages, costs or capacity,
            ``a`` outside [0, 1], ``y0`` above ``b0``, or an empty bucket.
        """
        for key in _REQUIRED:
            if data.get(key) is None:
                raise InstanceError(f"{key}: missing; the instance needs {', '.join(_REQUIRED)}")
        data = {k: v for k, v in data.items() if v is not None}
        if ("a" in data) == ("change_rate" in data):
            raise InstanceError("a: give exactly one of 'a' [B][T] and 'change_rate' [B]")
        dims = {}
        for key in ("buckets", "periods"):
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InstanceError(f"{key}: expected an integer >= 1, got {value!r}")
            dims[key] = int(value)
        B, T = dims["buckets"], dims["periods"]
        check_model_size(B, T)
        per_bucket = {"[B]": (B,)}
        per_period = {"a scalar": (), "[T]": (T,)}
        per_bucket_period = {"a scalar": (), "[B]": (B,), "[B][T]": (B, T)}
        arrays: dict[str, np.ndarray] = {}
        for key in ("b0", "y0"):
            arrays[key] = _shaped(_as_array(data, key), key, per_bucket)
        for key in ("capacity", "new_crawl_cost", "newnwt"):
            arrays[key] = _shaped(_as_array(data, key), key, per_period)
        for key in ("crawl_cost", "oldnwt"):
            arrays[key] = _shaped(_as_array(data, key), key, per_bucket_period)
        scalars = {}
        for key in ("n0", "nconst"):
            value = _as_array(data, key)
            if value.shape != ():
                raise InstanceError(f"{key}: expected a scalar, got shape {list(value.shape)}")
            _check(value, key)
            scalars[key] = float(value)
        for key, value in arrays.items():
            _check(value, key)
        if "a" in data:
            arrays["a"] = _shaped(_as_array(data, "a"), "a", {"[B][T]": (B, T)})
            _check(arrays["a"], "a", high=1.0)
        else:
            rate = _shaped(_as_array(data, "change_rate"), "change_rate", per_bucket)
            _check(rate, "change_rate")
            arrays["a"] = change_fraction(rate, T)
        if np.any(arrays["b0"] <= 0):
            i = int(np.argmax(arrays["b0"] <= 0))
            raise InstanceError(
                f"b0: bucket {i} has no pages; drop empty buckets or merge them into a neighbour"
            )
        if np.any(arrays["y0"] > arrays["b0"]):
            i = int(np.argmax(arrays["y0"] > arrays["b0"]))
            raise InstanceError(f"y0: bucket {i} has more obsolete pages than pages (b0)")
        if data.get("p") is None:
            p = arrays["b0"] / arrays["b0"].sum()
        else:
            p = _shaped(_as_array(data, "p"), "p", per_bucket)
            _check(p, "p")
            if p.sum() <= 0:
                raise InstanceError("p: the shares of new pages per bucket must not all be 0")
            p = p / p.sum()
        return cls(
            buckets=B,
            periods=T,
            b0=_frozen(arrays["b0"]),
            y0=_frozen(arrays["y0"]),
            n0=scalars["n0"],
            a=_frozen(arrays["a"]),
            capacity=_frozen(arrays["capacity"]),
            crawl_cost=_frozen(arrays["crawl_cost"]),
            new_crawl_cost=_frozen(arrays["new_crawl_cost"]),
            oldnwt=_frozen(arrays["oldnwt"]),
            newnwt=_frozen(arrays["newnwt"]),
            nconst=scalars["nconst"],
            p=_frozen(p),
        )

    def to_mapping(self) -> dict[str, Any]:
        """The instance as plain lists, in the keys :meth:`from_mapping` reads (``a`` form)."""
        out: dict[str, Any] = {"periods": self.periods, "buckets": self.buckets}
        for key in ("b0", "y0", "a", "capacity", "crawl_cost", "new_crawl_cost"):
            out[key] = getattr(self, key).tolist()
        for key in ("oldnwt", "newnwt", "p"):
            out[key] = getattr(self, key).tolist()
        out["n0"] = self.n0
        out["nconst"] = self.nconst
        return out

    def replace(self, **changes: Any) -> CrawlInstance:
        """A validated copy with some keys changed (for what-if runs)."""
        data = self.to_mapping()
        if "change_rate" in changes:
            data.pop("a")
        data.update(changes)
        return CrawlInstance.from_mapping(data)

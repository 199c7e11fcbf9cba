"""A nightly run that dies by SIGKILL (kill -9) at a named point: the fault seam of
tests/test_nightly_faults.py, used only by tests.

``python -m tests.nightly_fault DB_URL POINT NOW`` runs :func:`service.nightly.run_nightly` at
``NOW`` (ISO time) with :data:`tests.test_nightly_faults.SETTINGS` and kills itself with
SIGKILL, the signal no handler sees, at ``POINT``:

- ``estimate``: after the first chunk of change-rate estimates is written (3 pages a chunk),
  the rest not yet;
- ``solve``: when the solver has returned, before anything of the plan is written;
- ``publish``: inside the publish transaction, after the plan's rows are inserted and before
  the commit;
- ``schedule``: after the plan is published, before its page schedule is written.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import datetime
from typing import Any

import service.nightly as nightly
from store import open_database

POINTS = ("estimate", "solve", "publish", "schedule")


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def inject(point: str) -> None:
    """Patch the nightly module so that the run dies at ``point``."""
    if point == "estimate":
        real_estimate = nightly.estimate_from_store

        def estimate(*args: Any, **kwargs: Any) -> Any:
            kwargs["chunk_pages"] = 3
            kwargs["progress"] = lambda _pages: _die()
            return real_estimate(*args, **kwargs)

        nightly.estimate_from_store = estimate  # type: ignore[assignment]
    elif point == "solve":
        real_plan = nightly.plan_within_caps

        def plan(*args: Any, **kwargs: Any) -> Any:
            real_plan(*args, **kwargs)
            _die()

        nightly.plan_within_caps = plan  # type: ignore[assignment]
    elif point == "publish":
        real_publish = nightly.publish_plan

        def publish(db: Any, draft: Any, **kwargs: Any) -> Any:
            real_write = db.run_write

            def run_write(work: Any, **kw: Any) -> Any:
                def dying(conn: Any) -> Any:
                    work(conn)  # the plan's rows inserted, not committed
                    _die()

                return real_write(dying, **kw)

            db.run_write = run_write
            return real_publish(db, draft, **kwargs)

        nightly.publish_plan = publish  # type: ignore[assignment]
    elif point == "schedule":

        def schedule(*_args: Any, **_kwargs: Any) -> Any:
            _die()

        nightly.schedule_pages = schedule  # type: ignore[assignment]
    else:
        raise SystemExit(f"unknown point {point!r}: one of {', '.join(POINTS)}")


def main(db_url: str, point: str, now: str) -> None:
    from tests.test_nightly_faults import SETTINGS

    inject(point)
    report = nightly.run_nightly(
        open_database(db_url), SETTINGS, now=datetime.fromisoformat(now), say=print
    )
    print(f"not killed: {report.status}")  # the test fails on exit 0


if __name__ == "__main__":
    main(*sys.argv[1:4])

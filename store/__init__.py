"""Persistence for crawlplan: models, migrations, sessions, the lease queue, plan versions.

The store keeps pages, hosts, observations (append-only evidence of every fetch), plans with
their per-period quotas, and leases. The same code runs on an embedded SQLite file (the
default, WAL mode) and on PostgreSQL (``postgresql://...``), where leasing uses
``FOR UPDATE SKIP LOCKED`` so that many workers lease concurrently.

Imports: the standard library, ``sqlalchemy`` and its drivers, ``alembic``. Nothing from
``planner``, ``estimators``, ``crawler`` or ``scenarios``: the store holds no planning or
crawling logic, it persists what those packages compute and hands it back. It owns the
identity of pages: one normalized URL is one page, and a directory URL and its index file
that answer as one document are one page (``store.duplicates``, settled in the report's
transaction). Inside, the generic modules (leases, releases, pages, ...) call the engines'
SQL (``store.dialects``) through ``db.backend`` and never the reverse; the engines sit over
``store.database``, over the interfaces both sides share (``store.backend``); only
``store.open`` imports the engines (the layers contract in ``pyproject.toml``).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

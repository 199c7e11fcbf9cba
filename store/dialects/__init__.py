"""The store's SQL, one module per database engine and concern, behind small interfaces.

The release (:mod:`store.releases`) and the lease queue (:mod:`store.leases`) hold what both
engines share: the transaction, the checks, the bookkeeping. What differs between SQLite and
PostgreSQL (the bulk statements, how rows are locked, how times cross the driver) lives here,
as Frontera keeps one backend package per engine:

=====================  ====================================  =========================
concern                interface (:mod:`store.backend`)      modules
=====================  ====================================  =========================
period releases        :class:`~store.backend.ReleaseSql`    ``sqlite_releases``,
                                                             ``postgresql_releases``
the lease queue        :class:`~store.backend.LeaseSql`      ``sqlite_leases``,
                                                             ``postgresql_leases``
hosts' ``ready_at``    :class:`~store.backend.HostReadySql`  ``sqlite_host_ready``,
                                                             ``postgresql_host_ready``
new pages, page locks  :class:`~store.backend.PagesSql`      ``sqlite_pages``,
                                                             ``postgresql_pages``
=====================  ====================================  =========================

:func:`~store.open.open_database` gives the :class:`~store.database.Database` it opens the
:class:`~store.backend.Backend` of its engine (:func:`backend_for`); a test that injects a
fault assigns the database's ``backend`` one with a subclass of one of these classes instead.

Imports: the standard library, ``sqlalchemy``, and the store's modules below the engines
(:mod:`store.backend`, :mod:`store.database`, :mod:`store.models`, :mod:`store.types`), never
the generic modules that call the engines (:mod:`store.releases`, :mod:`store.leases`,
:mod:`store.host_ready`, :mod:`store.pages`): the layers contract of ``pyproject.toml``.
"""

from __future__ import annotations

from store.backend import (
    Backend,
    ChosenPages,
    HostReadySql,
    LeaseBatch,
    LeaseSql,
    PagesSql,
    ReleaseSql,
)

__all__ = [
    "Backend",
    "ChosenPages",
    "HostReadySql",
    "LeaseBatch",
    "LeaseSql",
    "PagesSql",
    "ReleaseSql",
    "backend_for",
]


def backend_for(dialect: str) -> Backend:
    """The SQL of the engine named ``dialect`` (``"sqlite"`` or ``"postgresql"``)."""
    if dialect == "postgresql":
        from store.dialects.postgresql_host_ready import PostgresqlHostReady
        from store.dialects.postgresql_leases import PostgresqlLeases
        from store.dialects.postgresql_pages import PostgresqlPages
        from store.dialects.postgresql_releases import PostgresqlReleases

        return Backend(
            releases=PostgresqlReleases(),
            leases=PostgresqlLeases(),
            host_ready=PostgresqlHostReady(),
            pages=PostgresqlPages(),
        )
    if dialect == "sqlite":
        from store.dialects.sqlite_host_ready import SqliteHostReady
        from store.dialects.sqlite_leases import SqliteLeases
        from store.dialects.sqlite_pages import SqlitePages
        from store.dialects.sqlite_releases import SqliteReleases

        return Backend(
            releases=SqliteReleases(),
            leases=SqliteLeases(),
            host_ready=SqliteHostReady(),
            pages=SqlitePages(),
        )
    raise ValueError(f"no store backend for the {dialect!r} dialect")

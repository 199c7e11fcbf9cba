"""``crawlplan init``: create the database schema, or migrate it to this version."""

from __future__ import annotations

from service.cli.options import ConfigOption, DbOption
from service.cli.support import out, settings_from, user_errors

__all__ = ["init"]


@user_errors
def init(db: DbOption = None, config: ConfigOption = None) -> None:
    """Create the database schema, or migrate an existing database to this version."""
    from store import open_database, upgrade_schema

    settings = settings_from(db, config)
    database = open_database(settings.db_url, create=True)
    before, after = upgrade_schema(database)
    if before is None:
        out.print(f"initialized {database.display_url} (schema revision {after})")
    elif before == after:
        out.print(f"{database.display_url} is up to date (schema revision {after})")
    else:
        out.print(f"migrated {database.display_url} from schema revision {before} to {after}")

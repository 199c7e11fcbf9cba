"""``crawlplan config``: every setting, its value and where it came from.

Secrets are masked as ``init``, ``status`` and ``serve`` mask them: the database URL's
password shows as ``***``, the API tokens as ``***`` and their count.
"""

from __future__ import annotations

from typing import Any

from service.cli.options import ConfigOption, DbOption
from service.cli.support import out, settings_from, user_errors

__all__ = ["show_config"]


@user_errors
def show_config(db: DbOption = None, config: ConfigOption = None) -> None:
    """Print every setting, its value and where it came from (option, environment, file).
    The database password and the API tokens are masked."""
    from service.config import SETTINGS

    settings = settings_from(db, config)
    width = max(len(s.key) for s in SETTINGS)
    for s in SETTINGS:
        shown = masked(s.key, settings.values[s.key])
        out.print(f"{s.key:<{width}} = {shown}", markup=False)
        out.print(
            f"{'':<{width}}   from {settings.origins[s.key]}; ${s.env}; {s.help}", markup=False
        )


def masked(key: str, value: Any) -> Any:
    """``value`` as ``crawlplan config`` may print it: no password, no whole token."""
    if key == "store.db":
        return _url_without_password(str(value))
    if key == "api.tokens":
        count = sum(1 for t in str(value).split(",") if t.strip())
        return f"*** ({count} token{'s' if count != 1 else ''})" if count else ""
    if isinstance(value, (tuple, list)):  # pattern lists: as crawlplan.toml would hold them
        return "[" + ", ".join(f'"{item}"' for item in value) + "]"
    return value


def _url_without_password(url: str) -> str:
    """The URL with its password as ``***`` (SQLAlchemy's own rendering); a URL SQLAlchemy
    cannot parse has everything between ``://`` and the last ``@`` hidden instead."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        scheme, sep, rest = url.partition("://")
        if sep and "@" in rest:
            return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url

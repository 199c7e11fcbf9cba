"""``crawlplan config``: every setting, its value and where it came from."""

from __future__ import annotations

from service.cli.options import ConfigOption, DbOption
from service.cli.support import out, settings_from, user_errors

__all__ = ["show_config"]


@user_errors
def show_config(db: DbOption = None, config: ConfigOption = None) -> None:
    """Print every setting, its value and where it came from (option, environment, file)."""
    from service.config import SETTINGS

    settings = settings_from(db, config)
    width = max(len(s.key) for s in SETTINGS)
    for s in SETTINGS:
        out.print(f"{s.key:<{width}} = {settings.values[s.key]}", markup=False)
        out.print(
            f"{'':<{width}}   from {settings.origins[s.key]}; ${s.env}; {s.help}", markup=False
        )

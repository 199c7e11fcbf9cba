"""What every ``crawlplan`` command shares: the two consoles and the user-error wrapper.

Commands live in :mod:`service.cli.app` and in edge modules beside it (``crawlplan scenario``,
``crawlplan importance``); they all print through :data:`out` and :data:`err` and wrap
themselves in :func:`user_errors`, so a user's mistake is one ``error:`` line with exit code 2
wherever the command is defined.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from sqlalchemy import exc as sa_exc

from service.errors import USER_ERRORS

__all__ = ["err", "fail", "out", "user_errors"]

P = ParamSpec("P")
R = TypeVar("R")

#: Results go to stdout; progress, warnings and errors to stderr.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr and return the exit to raise."""
    err.print(f"error: {message}", markup=False)
    return typer.Exit(code)


def user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn the user's mistakes into one ``error:`` line and exit code 2, not a traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except USER_ERRORS as error:
            raise fail(str(error)) from None
        except sa_exc.OperationalError as error:
            reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
            raise fail(f"database error: {reason}") from None

    return wrapper

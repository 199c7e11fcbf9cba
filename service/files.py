"""Reading and writing the files the CLI takes and gives (service edge).

Every failure becomes an :class:`~service.errors.InputFileError` whose message names the file
and what is wrong with it, so the CLI prints one line instead of a traceback.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from service.errors import InputFileError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "open_binary_input",
    "open_text_input",
    "read_json",
    "read_table",
    "write_json",
    "write_table",
]


def open_text_input(stack: ExitStack, path: Path) -> TextIO:
    """A text file (or standard input for ``-``), opened inside ``stack``."""
    if str(path) == "-":
        return sys.stdin
    try:
        return stack.enter_context(path.open(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        raise InputFileError(f"file {path} does not exist") from None
    except IsADirectoryError:
        raise InputFileError(f"file {path} is a directory; pass a file") from None
    except OSError as error:
        raise InputFileError(f"cannot read file {path}: {error.strerror or error}") from None


def open_binary_input(stack: ExitStack, path: Path) -> BinaryIO:
    """A file (or standard input for ``-``) opened for bytes inside ``stack``: for readers
    that bound their lines and decode them themselves (seed files)."""
    if str(path) == "-":
        return sys.stdin.buffer
    try:
        return stack.enter_context(path.open("rb"))
    except FileNotFoundError:
        raise InputFileError(f"file {path} does not exist") from None
    except IsADirectoryError:
        raise InputFileError(f"file {path} is a directory; pass a file") from None
    except OSError as error:
        raise InputFileError(f"cannot read file {path}: {error.strerror or error}") from None


def read_json(path: Path) -> Any:
    """The JSON document in ``path``."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFileError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise InputFileError(f"{path} is a directory; pass a JSON file") from None
    except json.JSONDecodeError as error:
        raise InputFileError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputFileError(f"cannot read {path}: {error}") from None


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON."""
    try:
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as error:
        raise InputFileError(f"cannot write {path}: {error.strerror or error}") from None


_TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def read_table(path: Path) -> pd.DataFrame:
    """A CSV (every column read as text) or Parquet table."""
    import pandas as pd  # here, not at start-up: `crawlplan seed` reads text, not tables

    suffix = path.suffix.lower()
    if suffix not in _TABLE_SUFFIXES:
        raise InputFileError(f"{path}: expected a .csv or .parquet file")
    try:
        if suffix == ".csv":
            return pd.read_csv(path, dtype=str, skipinitialspace=True)
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise InputFileError(f"{path} does not exist") from None
    except (OSError, ValueError, pd.errors.ParserError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputFileError(f"cannot read {path}: {first}") from None


def write_table(table: pd.DataFrame, path: Path) -> None:
    """Write a table as CSV or Parquet, by the file's suffix."""
    suffix = path.suffix.lower()
    if suffix not in _TABLE_SUFFIXES:
        raise InputFileError(f"{path}: the output must end in .csv or .parquet")
    try:
        if suffix == ".csv":
            table.to_csv(path, index=False)
        else:
            table.to_parquet(path, index=False)
    except OSError as error:
        raise InputFileError(f"cannot write {path}: {error.strerror or error}") from None

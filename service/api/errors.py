"""The worker API's error answers: a 422 that names what was wrong, never a 500 from it.

A JSON body may hold ``NaN``, ``Infinity`` or ``-Infinity`` (Python's parser accepts them,
though RFC 8259 does not). The request models refuse them in every number field
(``allow_inf_nan=False``: "Input should be a finite number"), and the 422 that says so must
not echo them raw: a JSON response cannot hold them, and rendering one was a 500 with a
traceback. :func:`validation_failed` answers with each error's field, message and input, the
non-finite numbers written as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

__all__ = ["json_safe", "validation_failed"]

#: What an error echoes of a long input (a string or a list), so a 422 stays small.
_ECHO_CHARACTERS = 200


async def validation_failed(_request: Request, error: Exception) -> JSONResponse:
    """422 with ``{"detail": [{"loc", "msg", "type", "input"}, ...]}``, JSON-safe."""
    assert isinstance(error, RequestValidationError)
    detail = [
        {
            "loc": list(e.get("loc", ())),
            "msg": str(e.get("msg", "invalid")),
            "type": str(e.get("type", "value_error")),
            "input": json_safe(e.get("input")),
        }
        for e in error.errors()
    ]
    return JSONResponse({"detail": detail}, status_code=422)


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` with non-finite floats as strings, long strings cut, anything else that is
    not JSON as its ``repr``, and nesting past 10 levels elided."""
    if depth > 10:
        return "..."
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= _ECHO_CHARACTERS else value[:_ECHO_CHARACTERS] + "..."
    if isinstance(value, dict):
        items = list(value.items())[:20]
        return {str(k)[:_ECHO_CHARACTERS]: json_safe(v, depth + 1) for k, v in items}
    if isinstance(value, list | tuple):
        return [json_safe(v, depth + 1) for v in value[:20]]
    return repr(value)[:_ECHO_CHARACTERS]

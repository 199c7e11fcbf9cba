"""``crawlplan serve``: the worker API over HTTP (FastAPI app served by uvicorn).

FastAPI and uvicorn are imported when the command runs, not when the CLI starts.
"""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from service.cli.options import AllowPrivateOption, ConfigOption, DbOption
from service.cli.support import err, fail, freeze_start_up, open_checked, settings_from, user_errors

__all__ = ["serve"]


@user_errors
def serve(
    host: Annotated[
        str | None, typer.Option("--host", help="Address to listen on.", show_default=False)
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Port to listen on.", show_default=False),
    ] = None,
    allow_private: AllowPrivateOption = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Serve the worker API (HTTP/JSON, OpenAPI at /docs) so that remote workers
    (`crawlplan worker --api URL`) lease and report without database credentials.

    Needs api.tokens (comma-separated bearer tokens, 16+ characters each) in crawlplan.toml
    or $CRAWLPLAN_API_TOKENS. Stops cleanly on Ctrl-C or SIGTERM.
    """
    import uvicorn

    from service.api.app import ApiSettings, create_app

    settings = settings_from(db, config)
    tokens = settings.api_tokens
    if not tokens or any(len(t) < 16 for t in tokens):
        raise fail(
            "the worker API needs api.tokens: set $CRAWLPLAN_API_TOKENS or [api] tokens in "
            "crawlplan.toml to one or more comma-separated tokens of 16+ characters"
        )
    database = open_checked(settings)
    app_ = create_app(
        database,
        ApiSettings(
            tokens=tokens,
            policy=settings.lease_policy,
            max_body_bytes=int(settings.values["api.max_body_bytes"]),
            min_delay_seconds=float(settings.values["crawl.min_delay"]),
            allow_private=allow_private,
        ),
    )
    listen = host or str(settings.values["api.host"])
    listen_port = port or int(settings.values["api.port"])
    # Listen before saying so: a client (or a script waiting for this line) that connects
    # right after it is queued by the kernel until uvicorn accepts, never refused.
    family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    try:
        sock = socket.create_server((listen, listen_port), family=family)
    except OSError as error:
        raise fail(
            f"cannot listen on {listen}:{listen_port}: {error.strerror or error}; "
            "pass another --port or --host"
        ) from None
    server = uvicorn.Server(
        uvicorn.Config(
            app_,
            log_level="warning",
            limit_concurrency=int(settings.values["api.max_connections"]),
            timeout_keep_alive=5,
        )
    )
    err.print(f"worker API on http://{listen}:{listen_port} (OpenAPI at /docs)", markup=False)
    freeze_start_up()
    with sock:
        server.run(sockets=[sock])

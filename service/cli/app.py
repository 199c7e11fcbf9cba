"""The ``crawlplan`` command line (Typer): the app, assembled from one module per command.

Each command lives in its own module under ``service/cli/`` (as Scrapy keeps its commands in
``scrapy/commands/``) and imports its heavy libraries (the store, the crawler, numpy, pandas,
Pyomo, FastAPI, ...) inside the command function, so that ``crawlplan --help`` and the light
commands start without loading the libraries of the others.

Exit codes: 0 success; 1 done, but some input was rejected (listed on stderr); 2 a user error
(bad option, configuration, database URL or input file), printed as one ``error:`` line;
130 interrupted.
"""

from __future__ import annotations

import sys

import typer

from service.cli.crawl import crawl
from service.cli.demo import demo
from service.cli.estimate import estimate
from service.cli.importance import importance
from service.cli.init import init
from service.cli.nightly import nightly
from service.cli.notify import notify
from service.cli.release import release
from service.cli.scenario import scenario_app
from service.cli.schedule import schedule
from service.cli.seed import seed
from service.cli.serve import serve
from service.cli.show_config import show_config
from service.cli.solve import solve
from service.cli.status import status
from service.cli.support import err, user_errors
from service.cli.web import web
from service.cli.worker import worker

__all__ = ["app", "main"]

app = typer.Typer(
    name="crawlplan",
    help=(
        "Optimization-driven crawl planner: estimates change rates, solves the WebFountain "
        "plan, and hands crawler workers polite, prioritized leases.\n\n"
        "Start with `crawlplan init`, then `crawlplan seed URL...`, then `crawlplan status`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# The order of `crawlplan --help`: set up, feed, look, crawl, plan, files in/out, what-if, serve.
app.command("init")(init)
app.command("seed")(seed)
app.command("notify")(notify)
app.command("status")(status)
app.command("crawl")(crawl)
app.command("nightly")(nightly)
app.command("worker")(worker)
app.command("release")(release)
app.command("demo")(demo)
app.command("solve")(solve)
app.command("estimate")(estimate)
app.command("schedule")(schedule)
app.command("importance")(user_errors(importance))
scenario_app.command("web")(web)
app.add_typer(scenario_app, name="scenario")
app.command("serve")(serve)
app.command("config")(show_config)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)

"""``crawlplan notify``: record change notifications from URLs or a sitemap file.

A notified page is crawled soon (still politely), and a page whose site reliably notifies its
changes gets its change rate from the notifications and no blind recrawls. A sitemap
(``<urlset>``) entry counts as a notification when it has a ``<lastmod>``; see
``docs/examples/sitemap.xml``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.options import ConfigOption, DbOption
from service.cli.support import counted, err, fail, open_checked, out, settings_from, user_errors

if TYPE_CHECKING:
    from store.notifications import Notification

__all__ = ["notify"]


@user_errors
def notify(
    urls: Annotated[
        list[str] | None, typer.Argument(help="Pages that changed.", show_default=False)
    ] = None,
    sitemap: Annotated[
        Path | None,
        typer.Option(
            "--sitemap",
            help="A sitemap (<urlset>) file: each URL with a <lastmod> is a notification.",
            show_default=False,
        ),
    ] = None,
    changed_at: Annotated[
        str | None,
        typer.Option(
            "--changed-at",
            help="When the URLs changed (ISO-8601; default now).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Record change notifications: the pages are crawled soon (still politely), and a page
    whose site reliably notifies its changes gets its rate from them and no blind recrawls.
    """
    from store.notifications import record_notifications

    if not urls and sitemap is None:
        raise fail("nothing to notify: pass URLs or --sitemap FILE")
    when = _changed_at(changed_at)
    pairs: list[tuple[str, datetime | None]] = [(u, when) for u in urls or []]
    if sitemap is not None:
        pairs += _sitemap_pairs(sitemap)
    items, bad = _notifications(pairs)
    database = open_checked(settings_from(db, config))
    done = record_notifications(database, items)
    out.print(
        f"recorded {counted(done.recorded, 'notification')} "
        f"({counted(done.added, 'page')} new to the store); "
        f"{counted(done.queued, 'page')} queued for a crawl"
    )
    for line in bad[:10]:
        err.print(f"  rejected {line}", markup=False)
    if bad:
        err.print(f"error: {len(bad):,} URLs were not recorded (listed above)", markup=False)
        raise typer.Exit(1)


def _changed_at(text: str | None) -> datetime | None:
    """``--changed-at`` as an aware time (UTC when it names no zone); None: now."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise fail(f"--changed-at must be an ISO-8601 time, got {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _sitemap_pairs(path: Path) -> list[tuple[str, datetime | None]]:
    """``(loc, lastmod)`` of every sitemap entry that has a ``<lastmod>``."""
    from crawler.sitemaps import SitemapError, parse_sitemap
    from service.errors import InputFileError

    try:
        entries = parse_sitemap(path.read_bytes())
    except OSError as error:
        raise InputFileError(f"cannot read {path}: {error.strerror}") from None
    except SitemapError as error:
        raise InputFileError(f"{path}: {error}") from None
    return [(e.loc, e.lastmod) for e in entries if e.lastmod is not None]


def _notifications(
    pairs: list[tuple[str, datetime | None]],
) -> tuple[list[Notification], list[str]]:
    """The notifications of the valid URLs, and one ``url: reason`` line per invalid one."""
    from crawler.urls import InvalidURLError, normalize_url, origin_of
    from store.notifications import Notification

    items, bad = [], []
    for url, at in pairs:
        try:
            normalized = normalize_url(url)
        except InvalidURLError as error:
            bad.append(f"{url}: {error}")
            continue
        items.append(Notification(normalized, origin_of(normalized), at))
    return items, bad

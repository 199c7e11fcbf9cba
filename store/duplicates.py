"""One document under two URLs: a directory URL and its index file.

A static server answers ``http://host/doc/`` with the file ``doc/index.html``, which is also
``http://host/doc/index.html``: two URLs, one document. Crawled as two pages, both were
planned, both re-crawled, both counted by the estimates (issue 27: ``/`` and
``/index.html`` of the PostgreSQL documentation served by nginx). A report marks the index
file of such a pair ``duplicate`` (:data:`~store.models.DUPLICATE_STATUS`) in its
transaction; the directory URL is the page the crawl keeps (its **canonical page**: the
shorter URL, the one sites link to and the one a server names a directory by).

**The rule.** Two pages are one document when all of these hold:

1. **Their URLs are a directory and its index file** (:func:`index_aliases`): ``X/`` and
   ``X/index.html`` or ``X/index.htm`` (nginx's, Apache's and most static servers' default
   index files), without a query; both on one host, since the URL's origin is kept.
2. **Their last fetches answered with the same page**: both ``ok`` with equal page
   signatures (``crawler.signature``'s 40 hex digits: SimHash, exact hash of the normalized
   main text, word count), so the exact content hash and the word count are equal.
3. **The page has words**: at least :data:`MIN_WORDS` (10) in its main text. Empty pages,
   script shells, and placeholder or error pages answered with 200 ("It works!", "Not
   Found", "Forbidden") are alike without being one file, and are never merged.
4. **The server says it is one file**: their ETags are equal, or their Last-Modified
   times are (both sent by the server), and neither validator differs where both pages
   have it. A static server gives one file one ETag and one modification time whatever the
   URL it was asked by; a dynamic answer with a fresh ETag or time per request is never
   merged.

A signature alone does not prove it: signatures mask digits and leave a page's frame out,
so two pages that differ in a version number, a date or their navigation share one; the
URL forms and the server's validators are what make the two one file.

**What a duplicate is.** The index file gets status ``duplicate``, no due time, and leaves
the release queue. Like an unfetchable page it is never a candidate, never released, not a
new page (n) nor a fetched page of any bucket, and its fetches are not evidence for the
estimators (:mod:`store.estimates`): the directory URL carries the document's history. A
link to it finds the stored row and adds nothing.

**The way back.** A duplicate is not crawled again, so nothing it does is seen. It becomes a
page again (status ``ok``, due as a fetched page is: at once before any plan, else when a
release chooses it) when its directory URL answers ``gone`` (404, 410) or ``redirect``: the
document may live at the index file alone now. A user who asks for it (``seed --now``, a
change notification) gets it fetched; if it still matches its directory it is marked again.

**Cost.** A report reads the URLs of its pages by primary key (one statement), and looks up
the aliases of the directory and index URLs among them by the unique URL index (a second
statement, only when there are any); the alias pages are locked with the report's own, in id
order, as every writer of pages locks them. No index is added.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, Connection, bindparam, select, update

from store.models import DUPLICATE_STATUS, PAGES, RELEASED_PAGES

__all__ = [
    "INDEX_FILES",
    "MIN_WORDS",
    "SIGNATURE_LENGTH",
    "AliasPairs",
    "PageAnswer",
    "alias_pairs",
    "index_aliases",
    "same_document",
    "settle_duplicates",
    "signature_words",
]

#: The file names a directory URL stands for (nginx's ``index`` and Apache's
#: ``DirectoryIndex`` defaults, and what static site generators write).
INDEX_FILES = ("index.html", "index.htm")
#: The fewest words (the signature's word count) a page needs to be merged with its alias.
MIN_WORDS = 10
#: Hex digits of a page signature (``crawler.signature.SIGNATURE_LENGTH``): 16 of SimHash, 16
#: of exact hash, 8 of word count; 8 more (the host's noise rules' fingerprint) when read
#: under noise rules. Other lengths (older signatures) are never merged; nor are redirects'
#: and gone pages' answer signatures (no words).
SIGNATURE_LENGTH = 40
#: Statuses of a canonical page after which its duplicates are pages again.
_REVIVING = frozenset({"gone", "redirect"})

_IDS: BindParameter[Any] = bindparam("ids", expanding=True)
_p = PAGES.c
_URLS = select(_p.id, _p.url).where(_p.id.in_(_IDS))
_URL_IDS = select(_p.url, _p.id).where(_p.url.in_(bindparam("urls", expanding=True)))
_ANSWERS = select(_p.id, _p.status, _p.signature, _p.etag, _p.last_modified, _p.host_id).where(
    _p.id.in_(_IDS)
)
_MARK = (
    update(PAGES)
    .where(_p.id.in_(_IDS), _p.status == "ok")
    .values(status=DUPLICATE_STATUS, next_due_at=None)
)
_UNQUEUE = RELEASED_PAGES.delete().where(RELEASED_PAGES.c.page_id.in_(_IDS))


def index_aliases(url: str) -> tuple[str, ...]:
    """The other URLs of ``url``'s document under the directory-index convention: a
    directory URL's index files, an index file's directory URL; ``()`` for any other URL or
    one with a query. ``url`` is normalized (``crawler.urls``: no fragment, a path)."""
    if "?" in url:
        return ()
    if url.endswith("/"):
        return tuple(url + name for name in INDEX_FILES)
    for name in INDEX_FILES:
        if url.endswith("/" + name):
            return (url[: -len(name)],)
    return ()


def signature_words(signature: str | None) -> int | None:
    """The word count a page signature holds; None for any other signature."""
    if signature is None or len(signature) not in (SIGNATURE_LENGTH, SIGNATURE_LENGTH + 8):
        return None
    try:
        return int(signature[32:SIGNATURE_LENGTH], 16)
    except ValueError:
        return None


@dataclass(frozen=True)
class PageAnswer:
    """What a page's last fetch answered, as stored: status, signature and validators."""

    status: str
    signature: str | None
    etag: str | None
    last_modified: datetime | None


def same_document(directory: PageAnswer, index: PageAnswer) -> bool:
    """Whether a directory URL and its index file answered with one document (the rule's
    points 2 to 4, module docstring; point 1, the URLs, is the caller's)."""
    if directory.status != "ok" or index.status != "ok":
        return False
    if directory.signature != index.signature:
        return False
    words = signature_words(directory.signature)
    if words is None or words < MIN_WORDS:
        return False
    agree = disagree = False
    for mine, theirs in (
        (directory.etag, index.etag),
        (directory.last_modified, index.last_modified),
    ):
        if mine is not None and theirs is not None:
            agree = agree or mine == theirs
            disagree = disagree or mine != theirs
    return agree and not disagree


@dataclass(frozen=True)
class AliasPairs:
    """The ``(directory page id, index page id)`` pairs of the stored pages among a report's,
    and every page id they hold (for the report to lock with its own)."""

    pairs: tuple[tuple[int, int], ...]

    @property
    def page_ids(self) -> set[int]:
        return {pid for pair in self.pairs for pid in pair}


def alias_pairs(conn: Connection, page_ids: Sequence[int]) -> AliasPairs:
    """The stored directory/index pairs that pages ``page_ids`` belong to. Read before the
    report locks its pages (a page's URL and id never change), so that the alias pages are
    locked with them, in id order."""
    if not page_ids:
        return AliasPairs(())
    wanted: dict[str, list[tuple[int, bool]]] = {}
    for pid, url in conn.execute(_URLS, {"ids": sorted(set(page_ids))}).tuples():
        for alias in index_aliases(url):
            wanted.setdefault(alias, []).append((int(pid), url.endswith("/")))
    if not wanted:
        return AliasPairs(())
    pairs: set[tuple[int, int]] = set()
    for alias, alias_id in conn.execute(_URL_IDS, {"urls": sorted(wanted)}).tuples():
        for pid, is_directory in wanted[alias]:
            pairs.add((pid, int(alias_id)) if is_directory else (int(alias_id), pid))
    return AliasPairs(tuple(sorted(pairs)))


def settle_duplicates(
    conn: Connection,
    pairs: AliasPairs,
    reported: Collection[int],
    *,
    due: datetime | None,
) -> tuple[list[int], dict[int, datetime]]:
    """Apply the rule to the pairs of a report, in its transaction, once its pages are
    written (and locked: the pairs' pages were locked with them).

    ``reported``: the pages whose state the report moved forward (its newer results). A pair
    of which a page was reported is settled: the index file becomes a duplicate when the two
    answered as one document, and a duplicate becomes a page (``ok``, due at ``due``: None
    once a plan is published, the release chooses it) when its directory answered gone or
    redirect. Returns the ids marked duplicate and ``{host id: due}`` of the pages made due
    (for the caller to lower the hosts' ready times).
    """
    settled = [pair for pair in pairs.pairs if pair[0] in reported or pair[1] in reported]
    if not settled:
        return [], {}
    rows = {
        int(row.id): row for row in conn.execute(_ANSWERS, {"ids": sorted(pairs.page_ids)}).all()
    }
    marked: set[int] = set()
    revived: set[int] = set()
    for directory_id, index_id in settled:
        directory, index = rows.get(directory_id), rows.get(index_id)
        if directory is None or index is None:
            continue
        if index.status == "ok" and same_document(_answer(directory), _answer(index)):
            marked.add(index_id)
        elif index.status == DUPLICATE_STATUS and directory.status in _REVIVING:
            revived.add(index_id)
    if marked:
        ids = sorted(marked)
        conn.execute(_MARK, {"ids": ids})
        conn.execute(_UNQUEUE, {"ids": ids})
    hosts: dict[int, datetime] = {}
    if revived:
        ids = sorted(revived)
        conn.execute(
            update(PAGES)
            .where(_p.id.in_(_IDS), _p.status == DUPLICATE_STATUS)
            .values(status="ok", next_due_at=due),
            {"ids": ids},
        )
        if due is not None:
            hosts = {int(rows[i].host_id): due for i in ids}
    return sorted(marked), hosts


def _answer(row: Any) -> PageAnswer:
    return PageAnswer(row.status, row.signature, row.etag, row.last_modified)

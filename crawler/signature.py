"""Content signatures: every real edit of a page's main content is a change, noise is not.

A page changed when the text a reader came for changed, not its bytes and not the page's
frame. The signature is computed from the page's **main text** (:func:`main_text`): the
``<main>`` (or ``role="main"``, or a lone ``<article>``) region when the page has one, else
its body, without what a site repeats around content (navigation, sidebars, footers,
banners, ads: by element, ARIA role and class or id names), scripts, styles or comments.
That text is **noise-normalized** (:func:`signature_words`): digit runs become ``0``, month
and weekday names next to a number and time units after one (``3 minutes ago``) are masked,
and tokens that look generated (mixed letters and digits of 8 or more characters, hex runs
of 12 or more, anything of 24 or more: session ids, CSRF tokens, cache busters) become
``0``. So a timestamp, a date, a visit counter or a token in the page is no change.

The change test is exact: two versions differ when the hashes of their normalized word
sequences differ, whatever the page's size (a paragraph added to a 400 KB page is a change).
The signature also keeps, as evidence of a change's size, a 64-bit SimHash (Charikar 2002;
Manku et al., WWW 2007) of the word 3-shingles (Broder et al. 1997) and the word count:
:func:`change_size` gives the Hamming distance of two SimHashes (0-64), the difference in
words, and from both the estimated share of the text that changed (:func:`change_share`).
With ``estimate.min_change`` set, the estimators count only changes of at least that share
(:func:`changes_at_least`, read from the stored signatures: it applies to evidence already
collected).

Layout: 40 hex digits, ``SSSSSSSSSSSSSSSS EEEEEEEEEEEEEEEE WWWWWWWW`` (SimHash, exact hash,
word count), then, on a host with noise rules (:mod:`crawler.noise`: elements whose text
changes per request, learned from a twin fetch and left out of the main text), the rules'
8-digit fingerprint. Signatures are compared only when both have the same form and the same
fingerprint (:func:`comparable`): one read under other rules, or the 32 digits of an older
crawlplan (whose exact hash covered the whole page), gives ``changed`` unknown.

Text that is not HTML gets a signature from its content too (:func:`document_text`): a
``text/plain`` page's text, an XML document's text nodes, a JSON document's keys and values.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

import lxml.html
import numpy as np
from lxml import etree

from crawler.links import decode_body, parse_html

if TYPE_CHECKING:
    from crawler.noise import NoiseRules

__all__ = [
    "SIGNATURE_LENGTH",
    "SIGNATURE_LENGTHS",
    "ChangeSize",
    "answer_signature",
    "change_share",
    "change_size",
    "changes_at_least",
    "comparable",
    "content_changed",
    "content_region",
    "document_text",
    "hamming",
    "main_text",
    "page_kind",
    "page_signature",
    "signature_words",
    "simhash",
    "visible_text",
]

#: Hex digits of a :func:`page_signature` (then 8 more when read under noise rules).
SIGNATURE_LENGTH = 40
#: Lengths of a page signature: without and with a noise rules' fingerprint.
SIGNATURE_LENGTHS = (SIGNATURE_LENGTH, SIGNATURE_LENGTH + 8)
_WORD = re.compile(r"\w+", re.UNICODE)
_DIGITS = re.compile(r"\d+")
_MONTHS_DAYS = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t|tember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
    r"|mon(?:day)?|tue(?:s|sday)?|wed(?:nesday)?|thu(?:rs|rsday)?|fri(?:day)?"
    r"|sat(?:urday)?|sun(?:day)?"
)
#: Noise, masked in this order on lower-cased text (each is replaced by " 0 "):
_NOISE = (
    # generated tokens: letters and digits mixed (8+), hex runs (12+), anything of 24+
    # (the first lookahead fails fast on the short words that most words are)
    re.compile(r"\b(?=\w{8})(?:(?=[a-z_]*\d)(?=\w*[a-z])\w+|[0-9a-f]{12,}\b|\w{24,})"),
    # a month or weekday name before a number ("nov 25", "tuesday, 3")
    re.compile(rf"\b(?:{_MONTHS_DAYS})\b(?=[\s,./-]{{0,3}}\d)"),
)
#: ... and a month, weekday or time unit after a number ("25 nov", "3 minutes ago", "5pm").
_AFTER_NUMBER = re.compile(
    rf"(\d)[\s,./-]{{0,3}}(?:{_MONTHS_DAYS}"
    r"|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|wks?|weeks?|months?"
    r"|y|yrs?|years?|am|pm|utc|gmt)\b"
)
#: Words' 64-bit hashes already computed (pages of a site share most of their words); cleared
#: when it reaches ``_WORD_HASHES_MAX`` entries, so memory stays bounded.
_WORD_HASHES: dict[str, int] = {}
_WORD_HASHES_MAX = 200_000
_INVISIBLE = ("script", "style", "noscript", "template")
#: Elements around content, not content: by tag, by ARIA role, by class or id.
_FRAME_TAGS = frozenset({"nav", "aside", "footer"})
_FRAME_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
_FRAME_NAME = re.compile(
    r"(?:^|[\s_-])(?:nav\w*|\w*navbar|menu\w*|\w*sidebar\w*|footer|breadcrumbs?|cookies?"
    r"|cookie\w+|banner|ads?|advert\w*|sponsor\w*|related|share|social|skip\w*)(?:$|[\s_-])",
    re.IGNORECASE,
)
#: Elements looked at as the frame: block elements (a highlighted code sample's many classed
#: spans are not), walked with lxml's tag filter, which is far faster than an XPath.
_FRAME_CANDIDATES = (
    "nav",
    "aside",
    "footer",
    "header",
    "div",
    "section",
    "ul",
    "ol",
    "table",
    "form",
    "p",
    "iframe",
)
#: Elements that can carry ``role="main"``.
_ROLE_MAIN_CANDIDATES = ("div", "section", "article", "td", "table")


@dataclass(frozen=True)
class ChangeSize:
    """How much two versions of a page differ (see :func:`change_size`)."""

    #: Hamming distance of the SimHashes (0-64); 0 for the same text.
    bits: int
    #: Words in the new version minus words in the old.
    words: int
    #: Estimated share of the main text that changed, 0-1 (:func:`change_share`).
    share: float = 0.0


def visible_text(html: str | bytes | lxml.html.HtmlElement) -> str:
    """The text a reader sees: no markup, scripts, styles or comments; whitespace collapsed.

    Given a parsed tree, strips the invisible elements from it in place (extract links
    first).
    """
    root = parse_html(html) if isinstance(html, str | bytes) else html
    if root is None:
        return ""
    etree.strip_elements(root, *_INVISIBLE, etree.Comment, with_tail=False)
    return " ".join(root.text_content().split())


def main_text(html: str | bytes | lxml.html.HtmlElement, noise: NoiseRules | None = None) -> str:
    """The text a reader came for: the page's main region without its frame (see the module
    docstring) and without the elements the host's ``noise`` rules name
    (:mod:`crawler.noise`); the region's whole text when that leaves nothing.

    Given a parsed tree, removes the invisible, frame and noise elements from it in place
    (extract links first).
    """
    root = parse_html(html) if isinstance(html, str | bytes) else html
    if root is None:
        return ""
    region, frames = _region_and_frames(root)
    if noise:
        frames.extend(_noise_elements(region, noise))
    return _text_without(region, frames)


def _noise_elements(
    region: lxml.html.HtmlElement, noise: NoiseRules
) -> list[lxml.html.HtmlElement]:
    """The elements of ``region`` the rules name, in document order, as long as together they
    hold at most ``MAX_RULE_SHARE`` of its words: a rule learned on one page of a site
    never hides the content of another whose template puts the text in the same element
    (there, the elements past the share stay in the text)."""
    from crawler.noise import MAX_RULE_SHARE

    matched = [e for e in region.iter(*noise.tags) if e is not region and noise.matches(e)]
    if not matched:
        return []
    budget = MAX_RULE_SHARE * len(region.text_content().split())
    kept: list[lxml.html.HtmlElement] = []
    chosen: set[lxml.html.HtmlElement] = set()
    covered = 0
    for element in matched:
        if any(a in chosen for a in element.iterancestors()):
            continue  # inside a noise element already cut
        words = len(element.text_content().split())
        if covered + words <= budget:
            kept.append(element)
            chosen.add(element)
            covered += words
    return kept


def content_region(root: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    """The page's main region with its invisible and frame elements cut out (in place): what
    :func:`main_text` reads, as a tree."""
    region, frames = _region_and_frames(root)
    _text_without(region, frames)
    return region


def _region_and_frames(
    root: lxml.html.HtmlElement,
) -> tuple[lxml.html.HtmlElement, list[lxml.html.HtmlElement]]:
    """Strip the invisible elements; the main region and its frame elements."""
    etree.strip_elements(root, *_INVISIBLE, etree.Comment, with_tail=False)
    region = _main_region(root)
    frames = _frames(region)
    if region.tag == "body" or region is root:
        # a site header sits directly in the body (an <article>'s own header is content)
        frames.extend(e for e in region.iterchildren("header"))
    return region, frames


def _main_region(root: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    """``<main>`` or ``role="main"``, else a lone ``<article>``, else ``<body>`` (or the root)."""
    found = next(root.iter("main"), None)
    if found is None:
        found = next(
            (e for e in root.iter(*_ROLE_MAIN_CANDIDATES) if e.get("role") == "main"), None
        )
    if found is not None:
        return found
    articles = list(islice(root.iter("article"), 2))
    if len(articles) == 1:
        return articles[0]
    body = root.find("body") if root.tag == "html" else None
    return body if body is not None else root


def _frames(region: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """The elements of ``region`` that frame content rather than being content."""
    return [e for e in region.iter(*_FRAME_CANDIDATES) if _is_frame(e)]


def _is_frame(element: lxml.html.HtmlElement) -> bool:
    if element.tag in _FRAME_TAGS:
        return True
    role, cls, ident = element.get("role"), element.get("class"), element.get("id")
    if role and role.strip().lower() in _FRAME_ROLES:
        return True
    return bool(cls or ident) and _FRAME_NAME.search(f"{cls or ''} {ident or ''}") is not None


def _text_without(region: lxml.html.HtmlElement, frames: list[lxml.html.HtmlElement]) -> str:
    """``region``'s text with the ``frames`` (its descendants, in document order) cut out,
    whitespace collapsed; when nothing else is left, the frames' text."""
    cut: set[lxml.html.HtmlElement] = set()
    for frame in frames:
        if frame is region or any(a in cut for a in frame.iterancestors()):
            continue  # inside a frame already cut out
        cut.add(frame)
        frame.drop_tree()  # keeps the text that follows the element (its tail)
    kept = " ".join(region.text_content().split())
    if kept or not cut:
        return kept
    return " ".join(" ".join(f.text_content() for f in frames if f in cut).split())


def page_kind(content_type: str | None, read_types: tuple[str, ...]) -> str | None:
    """How a fetched body is read: ``"html"`` (HTML, XHTML, or no Content-Type),
    ``"document"`` (another type the fetcher reads, ``read_types``: text, XML, JSON; see
    :func:`document_text`), or None for an asset whose body was not read."""
    ctype = (content_type or "").lower()
    if not ctype or ctype.startswith(("text/html", "application/xhtml+xml")):
        return "html"
    if any(ctype.startswith(t) for t in read_types):
        return "document"
    return None


def document_text(body: bytes, content_type: str | None, charset: str | None = None) -> str:
    """The text of a document that is not HTML: a JSON document's keys and values (keys
    sorted), an XML document's text nodes, anything else (``text/plain``) as it is. A JSON
    or XML body that does not parse is read as plain text."""
    ctype = (content_type or "").lower()
    text = decode_body(body, charset)
    if "json" in ctype:
        try:
            return " ".join(_json_words(json.loads(text)))
        except (ValueError, RecursionError):
            return text
    if "xml" in ctype:
        # UTF-8 named, so the declaration's encoding cannot mislead; no entities, no network
        parser = etree.XMLParser(encoding="utf-8", resolve_entities=False, no_network=True)
        try:
            root = etree.fromstring(text.encode("utf-8", errors="replace"), parser=parser)
        except (etree.XMLSyntaxError, ValueError):
            return text
        return " ".join(" ".join(root.itertext()).split())
    return text


def _json_words(value: object) -> list[str]:
    """Keys and scalar values of a JSON value, depth first, keys sorted."""
    if isinstance(value, dict):
        return [w for k in sorted(value) for w in (str(k), *_json_words(value[k]))]
    if isinstance(value, list):
        return [w for item in value for w in _json_words(item)]
    return [] if value is None else [str(value)]


def signature_words(text: str) -> list[str]:
    """``text``'s words as signatures see them: lower case, noise masked (module docstring)."""
    text = text.lower()
    for pattern in _NOISE:
        text = pattern.sub(" 0 ", text)
    text = _AFTER_NUMBER.sub(r"\1 0", text)
    return _WORD.findall(_DIGITS.sub("0", text))


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a fast, well-spread 64-bit permutation (uint64, wraps)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _shingle_hashes(words: list[str], size: int) -> np.ndarray:
    """One stable 64-bit hash per word ``size``-shingle, vectorized.

    Each distinct word is hashed once (BLAKE2b, stable across processes, unlike ``hash``;
    remembered across pages);
    a shingle's hash mixes its words' hashes position by position, so a page of a million
    words costs a few array operations, not a million digests.
    """
    known = _WORD_HASHES
    if len(known) >= _WORD_HASHES_MAX:
        known.clear()
    for word in set(words).difference(known):
        known[word] = _word_hash(word)
    try:
        word_hash = np.fromiter(map(known.__getitem__, words), dtype=np.uint64, count=len(words))
    except KeyError:  # another thread cleared the shared cache meanwhile
        word_hash = np.fromiter(
            (known.get(w) or _word_hash(w) for w in words), dtype=np.uint64, count=len(words)
        )
    if len(words) < size:
        size = len(words)
    n = len(words) - size + 1
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for offset in range(size):
            h = _mix(h ^ word_hash[offset : offset + n])
    return h


def _word_hash(word: str) -> int:
    """A word's stable 64-bit hash (BLAKE2b; never 0 in practice, and 0 only costs a miss)."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")


def simhash(text: str, *, shingle: int = 3) -> int:
    """64-bit SimHash of ``text``'s word shingles (digit runs masked); 0 for empty text."""
    return _simhash_words(signature_words(text), shingle)


def _simhash_words(words: list[str], shingle: int) -> int:
    if not words:
        return 0
    hashes = _shingle_hashes(words, shingle)
    # Bit k of the signature is 1 when more shingles have bit k set than not: count the
    # ones per bit position over all shingles at once (bits unpacked little-endian).
    bits = np.unpackbits(hashes.astype("<u8").view(np.uint8), bitorder="little")
    ones = bits.reshape(len(hashes), 64).sum(axis=0, dtype=np.int64)
    weights = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))
    return int(np.bitwise_or.reduce(weights[2 * ones > len(hashes)], initial=np.uint64(0)))


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit signatures."""
    return (a ^ b).bit_count()


def page_signature(text: str, noise_mark: str = "") -> str:
    """40 hex digits: the SimHash, an exact hash of the noise-normalized words, and the
    number of words (module docstring); then ``noise_mark``, the fingerprint of the host's
    noise rules the text was read under (:attr:`crawler.noise.NoiseRules.fingerprint`, 8
    hex digits; none without rules)."""
    words = signature_words(text)
    exact = hashlib.blake2b(" ".join(words).encode(), digest_size=8).hexdigest()
    return f"{_simhash_words(words, 3):016x}{exact}{min(len(words), 0xFFFFFFFF):08x}{noise_mark}"


def answer_signature(answer: str) -> str:
    """A :func:`page_signature` for an answer without a page: a redirect's status and target,
    a gone page's status (``answer``, compared exactly, no noise masked). A redirect that
    keeps its target is unchanged from fetch to fetch, so its URL gets a change rate (a slow
    one) like any page's, instead of none and the crawls the plan gives pages without an
    estimate; a redirect that moves, or a page that comes back, is a change."""
    exact = hashlib.blake2b(answer.encode(), digest_size=8).hexdigest()
    return f"{0:016x}{exact}{0:08x}"


def comparable(previous: str | None, current: str) -> bool:
    """Whether two signatures can be compared: both page signatures (40 hex digits, plus the
    same noise rules' fingerprint, or none, after them)."""
    return (
        previous is not None
        and len(previous) in SIGNATURE_LENGTHS
        and len(previous) == len(current)
        and previous[SIGNATURE_LENGTH:] == current[SIGNATURE_LENGTH:]
    )


def content_changed(previous: str | None, current: str, threshold: int = 0) -> bool | None:
    """Whether the content changed between two :func:`page_signature` values: their exact
    hashes differ (and, with ``threshold`` > 0, their SimHashes by more than that many bits:
    a near-duplicate test that misses small edits of long pages, off by default).

    None when there is nothing to compare with (first fetch, a signature of another form, or
    one read under other noise rules).
    """
    if not comparable(previous, current):
        return None
    assert previous is not None
    if previous[16:32] == current[16:32]:
        return False
    return threshold <= 0 or hamming(int(previous[:16], 16), int(current[:16], 16)) > threshold


def change_size(previous: str | None, current: str) -> ChangeSize | None:
    """How much the content moved between two :func:`page_signature` values; None when they
    cannot be compared (see :func:`content_changed`)."""
    if not comparable(previous, current):
        return None
    assert previous is not None
    if previous[16:32] == current[16:32]:
        return ChangeSize(bits=0, words=0, share=0.0)
    bits = hamming(int(previous[:16], 16), int(current[:16], 16))
    before = int(previous[32:SIGNATURE_LENGTH], 16)
    after = int(current[32:SIGNATURE_LENGTH], 16)
    return ChangeSize(bits=bits, words=after - before, share=change_share(bits, before, after))


def change_share(bits: int, words_before: int, words_after: int) -> float:
    """The estimated share of a page's main text that changed, 0-1, from the SimHashes'
    Hamming distance ``bits`` and the two versions' word counts.

    A SimHash bit differs with probability theta / pi, theta the angle between the two
    versions' shingle-count vectors (Charikar 2002), so ``1 - cos(pi bits / 64)`` estimates
    ``1 - cos theta``: the share of shingles replaced when the length stays. Words added or
    removed are counted exactly by the word counts, ``|after - before| / max``; the share is
    the larger of the two. Measured on 209 PostgreSQL documentation pages
    (``tests/benchmarks/bench_change_share.py``, 197 pages): appending or deleting 10 % of a
    page's words reads 9-10 %; replacing 10 % in place reads 7.6 % (median; 1.9-20 % for 80 %
    of pages), since repeated phrases weigh more in the SimHash than the replaced words. A
    threshold on the share separates a typo fix from a rewritten section, not 9 % from 10 %.
    """
    by_bits = 1.0 - math.cos(math.pi * min(bits, 32) / 64)
    longest = max(words_before, words_after)
    by_words = abs(words_after - words_before) / longest if longest else 0.0
    return min(1.0, max(by_bits, by_words))


def changes_at_least(
    pages: Sequence[int],
    changed: Sequence[bool | None],
    signatures: Sequence[str | None],
    min_share: float,
) -> tuple[list[bool | None], int]:
    """A page's fetches' change flags with "changed" meaning "changed by at least
    ``min_share`` of its main text" (:func:`change_share`), and how many changes that
    demoted to no change.

    The rows are one store's fetches ordered by page, then time (``pages``, ``changed`` and
    ``signatures`` of the same length). A fetch's change is measured against the page's
    previous fetch with a signature (a 304 carries none and keeps the one before): a change
    below ``min_share`` becomes no change; one whose size cannot be read (no signature, or
    signatures not :func:`comparable`) stays a change, since its size is unknown.
    """
    flags: list[bool | None] = list(changed)
    demoted = 0
    page: int | None = None
    last: str | None = None
    for i, (pid, flag, signature) in enumerate(zip(pages, changed, signatures, strict=True)):
        if pid != page:
            page, last = pid, None
        if flag and signature is not None and last is not None:
            size = change_size(last, signature)
            if size is not None and size.share < min_share:
                flags[i] = False
                demoted += 1
        if signature is not None:
            last = signature
    return flags, demoted

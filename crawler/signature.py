"""Content signatures that see real changes and ignore trivial ones.

A page changed when its visible text changed, not its bytes: a timestamp, a visit counter or
a rotating ad must not count, or every estimator downstream sees a page that "changes" on
every fetch. The signature is a 64-bit SimHash (Charikar 2002; Manku et al., WWW 2007) of the
page's word 3-shingles (Broder et al. 1997) after digit runs are masked, stored beside an
exact hash of the same masked text: versions that differ only in digits, markup, scripts or
whitespace (timestamps, counters) have equal exact hashes and are unchanged; versions whose
SimHashes differ in at most ``threshold`` bits are near-duplicates (a rotating widget, a
corrected typo) and also unchanged. Edits of about 1% of a long page fall under the
threshold too: that is the price of ignoring boilerplate churn, and the reason the threshold
is a setting.
"""

from __future__ import annotations

import hashlib
import re

import lxml.html
import numpy as np
from lxml import etree

__all__ = [
    "NEAR_DUPLICATE_BITS",
    "content_changed",
    "hamming",
    "page_signature",
    "simhash",
    "visible_text",
]

#: Signatures at most this many bits apart are the same content (Manku et al. use 3 of 64).
NEAR_DUPLICATE_BITS = 3
_WORD = re.compile(r"\w+", re.UNICODE)
_DIGITS = re.compile(r"\d+")
#: Words' 64-bit hashes already computed (pages of a site share most of their words); cleared
#: when it reaches ``_WORD_HASHES_MAX`` entries, so memory stays bounded.
_WORD_HASHES: dict[str, int] = {}
_WORD_HASHES_MAX = 200_000
_INVISIBLE = ("script", "style", "noscript", "template")


def visible_text(html: str | bytes | lxml.html.HtmlElement) -> str:
    """The text a reader sees: no markup, scripts, styles or comments; whitespace collapsed.

    Given a parsed tree, strips the invisible elements from it in place (extract links
    first).
    """
    if isinstance(html, str | bytes):
        try:
            root = lxml.html.fromstring(html)
        except (etree.ParserError, ValueError):
            return ""
    else:
        root = html
    etree.strip_elements(root, *_INVISIBLE, etree.Comment, with_tail=False)
    return " ".join(root.text_content().split())


def _words(text: str) -> list[str]:
    return _WORD.findall(_DIGITS.sub("0", text.lower()))


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
    ids: dict[str, int] = {}
    index = np.fromiter((ids.setdefault(w, len(ids)) for w in words), np.int64, len(words))
    known = _WORD_HASHES
    if len(known) >= _WORD_HASHES_MAX:
        known.clear()
    word_hash = np.fromiter(
        (known.get(w) or known.setdefault(w, _word_hash(w)) for w in ids),
        dtype=np.uint64,
        count=len(ids),
    )[index]
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
    return _simhash_words(_words(text), shingle)


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


def page_signature(text: str) -> str:
    """32 hex digits: the SimHash, then an exact hash of the digit-masked, normalized text."""
    words = _words(text)
    exact = hashlib.blake2b(" ".join(words).encode(), digest_size=8).hexdigest()
    return f"{_simhash_words(words, 3):016x}{exact}"


def content_changed(
    previous: str | None, current: str, threshold: int = NEAR_DUPLICATE_BITS
) -> bool | None:
    """Whether the content changed between two :func:`page_signature` values.

    None when there is nothing to compare with (first fetch, or a signature of another form).
    """
    if previous is None or len(previous) != 32 or len(current) != 32:
        return None
    if previous[16:] == current[16:]:
        return False
    return hamming(int(previous[:16], 16), int(current[:16], 16)) > threshold

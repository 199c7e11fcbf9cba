"""Noise rules: the elements of a site whose text changes from request to request, learned
from two fetches of one page.

Signatures mask what looks like noise anywhere on a page (:mod:`crawler.signature`: digit
runs, dates, generated tokens). What slips through is noise made of words: a teaser or a
quote picked at random, a rotating "related articles" box, a greeting chosen per visit. A
page that carries one counts as changed at nearly every fetch, and the estimators learn that
it changes at every visit: the plan spends crawls on it for nothing.

A site's noise sits in its template, in the same elements on every page. So once per host
(and again after :data:`NOISE_RECHECK`), the worker fetches the first HTML page of a lease
:data:`NOISE_TWINS` times more, the host's delay apart (the **twin fetches**), and
:func:`learn_noise` compares each version with the first element by element, as signatures
read them (invisible elements and the page's frame removed, words normalized): an element
whose own text (its text and its children's tails) differs holds noise. The rule names the
nearest element at or above it, inside the page's main region, with a stable ``class`` or
``id``: ``div.teaser``, ``p#greeting``.
Signatures of the host's pages then leave the text of every element a rule matches out
(:func:`crawler.signature.main_text`).

Guards, so that a rule never hides content:

- two versions that differ in more than :data:`MAX_NOISE_SHARE` of their words are not told
  apart from a real change: nothing is learned (None);
- a rule whose elements hold more than :data:`MAX_RULE_SHARE` of the page's words in either
  version is not kept;
- noise in an element with no stable name up to the main region is left alone (it still
  counts as a change): no rule names "every paragraph";
- ids and class names that look generated (digit runs of 3 or more, 24 characters or more)
  are not names.

Signatures made under rules carry the rules' :attr:`NoiseRules.fingerprint`: a signature made
under other rules (or none) is not compared with it (``changed`` unknown, once, after the
rules change), never counted as a change.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import timedelta
from difflib import SequenceMatcher
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light at run time: the worker API validates rules with this module
    import lxml.html

__all__ = [
    "MAX_NOISE_SHARE",
    "MAX_RULES",
    "MAX_RULE_SHARE",
    "NOISE_RECHECK",
    "NOISE_TWINS",
    "NoiseRules",
    "learn_noise",
]

#: How long a host's noise rules are trusted before the next twin fetch checks them again
#: (sites change their templates; one request per host per month is nothing to a crawl).
NOISE_RECHECK = timedelta(days=30)
#: Fetches of the checked page after the first: each version is compared with the first. A
#: teaser picked among k per request escapes one twin with probability 1/k, three with 1/k**3.
NOISE_TWINS = 3
#: Two versions whose differing words exceed this share of the page are a change, not noise.
MAX_NOISE_SHARE = 0.5
#: A rule may cover at most this share of a page's words.
MAX_RULE_SHARE = 0.25
#: Rules kept per host, at most (the rest is left alone).
MAX_RULES = 20

_RULE = re.compile(r"^([a-z][a-z0-9]*)(?:#([^\s#.]+)|((?:\.[^\s#.]+)+))$")
#: A name that looks generated: a run of 3+ digits, or 24+ characters.
_GENERATED = re.compile(r"\d{3}|^.{24,}$")


@dataclass(frozen=True)
class NoiseRules:
    """A host's noise rules: ``tag#id`` or ``tag.class1.class2`` (an element matches when
    its tag is the rule's and it has the id, or every class, named), sorted."""

    selectors: tuple[str, ...] = ()
    #: tag -> (id or None, classes) per rule, for matching.
    _by_tag: dict[str, list[tuple[str | None, frozenset[str]]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for selector in self.selectors:
            match = _RULE.match(selector)
            if match is None:
                raise ValueError(
                    f"noise rule {selector!r} is not tag#id or tag.class[.class...] "
                    "(lower-case tag, no spaces)"
                )
            tag, ident, classes = match.groups()
            names = frozenset(classes.strip(".").split(".")) if classes else frozenset()
            self._by_tag.setdefault(tag, []).append((ident, names))

    def __bool__(self) -> bool:
        return bool(self.selectors)

    @property
    def tags(self) -> tuple[str, ...]:
        """The tags the rules name (to walk a tree with lxml's tag filter)."""
        return tuple(self._by_tag)

    @property
    def fingerprint(self) -> str:
        """8 hex digits that change whenever the rules do; empty for no rules."""
        if not self.selectors:
            return ""
        return hashlib.blake2b("\n".join(self.selectors).encode(), digest_size=4).hexdigest()

    def matches(self, element: lxml.html.HtmlElement) -> bool:
        """Whether a rule names ``element``."""
        rules = self._by_tag.get(element.tag) if isinstance(element.tag, str) else None
        if not rules:
            return False
        ident = element.get("id")
        classes = set((element.get("class") or "").split())
        return any(
            (ident is not None and want_id == ident) or (bool(want) and want <= classes)
            for want_id, want in rules
        )

    def merged(self, other: NoiseRules) -> NoiseRules:
        """Both sets of rules, at most :data:`MAX_RULES`."""
        return NoiseRules(tuple(sorted(set(self.selectors) | set(other.selectors)))[:MAX_RULES])

    def to_text(self) -> str:
        """The rules as stored (``hosts.noise_rules``): one per line; "" for none."""
        return "\n".join(self.selectors)

    @classmethod
    def from_text(cls, text: str | None) -> NoiseRules:
        """Rules as stored; None or "" is no rules. Raises ValueError on a malformed rule."""
        lines = (text or "").split("\n")
        return cls(tuple(sorted({line.strip() for line in lines if line.strip()})))


def learn_noise(first: lxml.html.HtmlElement, second: lxml.html.HtmlElement) -> NoiseRules | None:
    """The rules that name what differs between two versions of one page fetched moments
    apart (parsed trees; both are changed in place). None when the versions differ too much
    to be one page with noise (:data:`MAX_NOISE_SHARE`); empty rules when they read the same,
    or when no difference sits in a nameable element.

    The versions' text-bearing elements are aligned as sequences (difflib), not by position:
    a block present in one version only shifts its siblings' positions, never makes them
    differ. Rules that together would cover more than :data:`MAX_RULE_SHARE` of either
    version's words lose their widest first."""
    from crawler.signature import content_region

    regions = content_region(first), content_region(second)
    one, two = (_owned_words(region) for region in regions)
    total = max(_word_count(one), _word_count(two))
    matcher = SequenceMatcher(None, [o.key for o in one], [o.key for o in two], autojunk=False)
    candidates: set[str] = set()
    noise_words = 0
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        noise_words += max(_word_count(one[i1:i2]), _word_count(two[j1:j2]))
        for owned, region in ((one[i1:i2], regions[0]), (two[j1:j2], regions[1])):
            candidates.update(r for r in (_rule_for(o.element, region) for o in owned) if r)
    if noise_words > MAX_NOISE_SHARE * total:
        return None
    kept = sorted(candidates)
    while kept:
        covers = {
            selector: max(_covered(NoiseRules((selector,)), owned) for owned in (one, two))
            for selector in kept
        }
        together = max(
            _covered(NoiseRules(tuple(kept)), owned) / max(_word_count(owned), 1)
            for owned in (one, two)
        )
        if together <= MAX_RULE_SHARE:
            break
        kept.remove(max(kept, key=lambda selector: (covers[selector], selector)))
    return NoiseRules(tuple(kept[:MAX_RULES]))


@dataclass(frozen=True)
class _Owned:
    """A text-bearing element of a region: its own text's words (its text and its children's
    tails, normalized as signatures read them), and its key for the alignment."""

    element: lxml.html.HtmlElement
    words: tuple[str, ...]

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return (str(self.element.tag), self.words)


def _owned_words(region: lxml.html.HtmlElement) -> list[_Owned]:
    """The elements of ``region`` that own words, in document order."""
    from crawler.signature import signature_words

    owned = []
    for element in region.iter():
        if not isinstance(element.tag, str):
            continue
        text = (element.text or "") + "".join(child.tail or "" for child in element)
        words = tuple(signature_words(text))
        if words:
            owned.append(_Owned(element, words))
    return owned


def _word_count(owned: list[_Owned]) -> int:
    return sum(len(o.words) for o in owned)


def _covered(rule: NoiseRules, owned: list[_Owned]) -> int:
    """Words of ``owned`` inside elements ``rule`` matches (nested matches counted once)."""
    return sum(
        len(o.words)
        for o in owned
        if rule.matches(o.element) or any(rule.matches(a) for a in o.element.iterancestors())
    )


def _rule_for(element: lxml.html.HtmlElement, region: lxml.html.HtmlElement) -> str | None:
    """The rule naming the nearest element at or above ``element`` with a stable id or
    class names, below ``region``; None when there is none."""
    for candidate in (element, *element.iterancestors()):
        if candidate is region:
            return None
        tag = candidate.tag
        ident = candidate.get("id")
        if ident and not _GENERATED.search(ident) and _RULE.match(f"{tag}#{ident}"):
            return f"{tag}#{ident}"
        names = sorted(
            name for name in (candidate.get("class") or "").split() if not _GENERATED.search(name)
        )
        if names and _RULE.match(f"{tag}.{'.'.join(names)}"):
            return f"{tag}.{'.'.join(names)}"
    return None

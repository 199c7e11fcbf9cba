"""Every relative link in README.md and docs/*.md points to a file that exists.

The docs link to each other and to benchmarks.md for figures; a renamed page or a moved file
would leave a dead link that no other test notices. Links to URLs (``http:``, ``mailto:``)
and pure anchors (``#section``) are not checked; a link's own anchor is dropped before the
path is resolved against the linking file's folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def _relative_links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of each relative link outside fenced code blocks."""
    links: list[tuple[int, str]] = []
    in_fence = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line.lstrip()):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            links.append((number, target))
    return links


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    dead = [
        f"{page.relative_to(ROOT)}:{number}: {target}"
        for number, target in _relative_links(page)
        if not (page.parent / target.split("#", 1)[0]).exists()
    ]
    assert not dead, "dead links:\n" + "\n".join(dead)


def test_the_pattern_finds_links() -> None:
    """The checker sees links at all: README links to docs/benchmarks.md."""
    targets = [target for _, target in _relative_links(ROOT / "README.md")]
    assert "docs/benchmarks.md" in targets

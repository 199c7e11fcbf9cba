"""How well a change's size is read from two signatures, on real documentation pages.

Run with ``python tests/benchmarks/bench_change_share.py [--pages 300] [--root DIR]`` (part
of ``make bench``). For each page of a Debian HTML documentation tree (PostgreSQL 15's by
default, ``postgresql-doc-15``) with at least 200 words, and each edit kind (a run of
words **replaced** in place by words of the page, **appended** at a random place, or
**deleted**) and size (0.2 %, 1 %, 3 %, 10 %, 30 % of the words), it signs the page's text
before and after (:func:`crawler.signature.page_signature`) and reads the change's share
of the text from the two signatures (:func:`crawler.signature.change_share`). It prints
the median and the 10th-90th percentiles of the read share per kind and size, beside the
two readings it combines (the SimHash alone, ``1 - cos(pi bits / 64)``, and the word
counts alone) as baselines. Seeded: the same pages and edits every run.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

import lxml.html

from crawler.signature import change_share, hamming, page_signature

ROOT = Path("/usr/share/doc/postgresql-doc-15/html")
KINDS = ("replace", "append", "delete")
SIZES = (0.002, 0.01, 0.03, 0.1, 0.3)


def _edit(words: list[str], kind: str, share: float, rng: random.Random) -> list[str]:
    k = max(1, int(len(words) * share))
    at = rng.randrange(0, len(words) - k)
    new = [rng.choice(words) for _ in range(k)]
    if kind == "replace":
        return words[:at] + new + words[at + k :]
    if kind == "append":
        return words[:at] + new + words[at:]
    return words[:at] + words[at + k :]


def _readings(before: str, after: str) -> tuple[float, float, float]:
    """The combined share, the SimHash's alone and the word counts' alone."""
    bits = hamming(int(before[:16], 16), int(after[:16], 16))
    old, new = int(before[32:40], 16), int(after[32:40], 16)
    by_bits = 1 - math.cos(math.pi * min(bits, 32) / 64)
    by_words = abs(new - old) / max(old, new)
    return change_share(bits, old, new), by_bits, by_words


def _spread(values: list[float]) -> str:
    deciles = statistics.quantiles(values, n=10)
    return f"{statistics.median(values):6.3f} ({deciles[0]:.3f}-{deciles[-1]:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args()
    files = sorted(args.root.glob("*.html"))
    if not files:
        sys.exit(f"no HTML pages under {args.root}: apt-get install postgresql-doc-15 (make bench)")
    rng = random.Random(27)
    rng.shuffle(files)
    texts = []
    for path in files[: args.pages]:
        words = " ".join(lxml.html.parse(str(path)).getroot().text_content().split()).split()
        if len(words) >= 200:
            texts.append(words)
    print(f"{len(texts)} pages of {args.root} with 200 words or more; read share of the text:")
    print(f"{'edit':<8} {'size':>5}  {'combined':<22} {'SimHash alone':<22} {'words alone':<22}")
    for kind in KINDS:
        for size in SIZES:
            rows = []
            for words in texts:
                before = page_signature(" ".join(words))
                after = page_signature(" ".join(_edit(words, kind, size, rng)))
                rows.append(_readings(before, after))
            combined, by_bits, by_words = (list(c) for c in zip(*rows, strict=True))
            print(
                f"{kind:<8} {size:>5.1%}  {_spread(combined):<22} {_spread(by_bits):<22} "
                f"{_spread(by_words):<22}"
            )


if __name__ == "__main__":
    main()

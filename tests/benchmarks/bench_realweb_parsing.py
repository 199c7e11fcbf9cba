"""Parsing and change detection on real documentation trees (Debian's HTML doc packages).

For each tree (default: ``postgresql-doc-15`` and ``python3.11-doc`` where installed), with
the crawler's own parsing and signature code, no network:

* pages parsed (with at least one link found), links found, distinct signatures, CPU per page;
* 50 real edits, a paragraph added to the main content of the 30 largest pages and of 20
  others drawn with a fixed seed: how many are detected as changes;
* 50 noisy re-renderings of 50 other pages (the local time, a visitor number and a random
  request id added before ``</body>``, as tests/realweb's nginx does): how many count as
  changes (they should not).

``--rev REV`` also runs the same measurement with ``crawler/`` as it was at git revision REV
(e.g. the commit before a change), for a before/after table::

    .venv/bin/python tests/benchmarks/bench_realweb_parsing.py --rev cf56c97~1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

TREES = {
    "postgresql-doc-15": Path("/usr/share/doc/postgresql-doc-15/html"),
    "python3.11-doc": Path("/usr/share/doc/python3.11-doc/html"),
}
PARAGRAPH = (
    '<p class="note">Editorial note {n}: this section now also explains how the setting '
    "interacts with replication, with an example of a safe rollout.</p>"
)
SEED = 27
REPO = Path(__file__).resolve().parents[2]


def _edit(html: bytes, n: int) -> bytes:
    """A paragraph added to the main content: at its start when the page marks it
    (``role="main">``), else before the footer navigation, else before ``</body>``."""
    paragraph = PARAGRAPH.format(n=n).encode()
    for marker, after in ((b'role="main">', True), (b'<div class="navfooter">', False)):
        at = html.find(marker)
        if at >= 0:
            at += len(marker) if after else 0
            return html[:at] + paragraph + html[at:]
    at = html.rfind(b"</body>")
    return html[:at] + paragraph + html[at:]


def _noise(html: bytes, rng: random.Random) -> bytes:
    stamp = datetime.fromtimestamp(rng.uniform(1.7e9, 1.8e9), UTC).strftime("%d/%b/%Y:%H:%M:%S")
    noise = (
        f'<p class="served">Served {stamp} +0000 to visitor {rng.randint(1, 999)}, '
        f"request {rng.getrandbits(128):032x}</p></body>"
    ).encode()
    return html.replace(b"</body>", noise, 1)


def measure(tree: Path) -> dict[str, Any]:
    """The figures for one tree, with whatever ``crawler`` is on ``sys.path``."""
    from crawler import links, signature

    new_api = hasattr(signature, "main_text")

    def read(body: bytes, url: str) -> tuple[list[str], str]:
        """As the worker reads a page: links first, then the text (which strips the tree)."""
        if new_api:
            root = links.parse_html(body, None)
        else:  # the crawler before issue 27: the decoded text, the whole visible text
            from crawler.fetch import FetchOutcome

            outcome = FetchOutcome(url, url, 200, datetime.now(UTC), 0.0, body=body)
            root = links.parse_html(outcome.text())
        if root is None:
            return [], signature.page_signature("")
        found = links.extract_links(root, url)
        text = signature.main_text(root) if new_api else signature.visible_text(root)
        return found, signature.page_signature(text)

    files = sorted(tree.rglob("*.html"))
    bodies = {f: f.read_bytes() for f in files}
    with_links = n_links = 0
    signatures = set()
    cpu = time.process_time()
    for file, body in bodies.items():
        found, sig = read(body, "http://docs.test/" + file.relative_to(tree).as_posix())
        with_links += bool(found)
        n_links += len(found)
        signatures.add(sig)
    cpu_ms = 1000 * (time.process_time() - cpu) / len(files)

    rng = random.Random(SEED)
    by_size = sorted(files, key=lambda f: len(bodies[f]), reverse=True)
    rest = by_size[30:]
    rng.shuffle(rest)
    edited, noisy = by_size[:30] + rest[:20], rest[20:70]
    detected = 0
    for n, file in enumerate(edited):
        url = "http://docs.test/" + file.name
        before, after = read(bodies[file], url)[1], read(_edit(bodies[file], n), url)[1]
        detected += signature.content_changed(before, after) is True
    false_changes = 0
    for file in noisy:
        url = "http://docs.test/" + file.name
        first = read(_noise(bodies[file], rng), url)[1]
        second = read(_noise(bodies[file], rng), url)[1]
        false_changes += signature.content_changed(first, second) is True
    return {
        "pages": len(files),
        "with_links": with_links,
        "links": n_links,
        "signatures": len(signatures),
        "cpu_ms": cpu_ms,
        "edits": f"{detected}/{len(edited)}",
        "smallest_edited_kb": min(len(bodies[f]) for f in edited[:30]) // 1000,
        "noise_counted": f"{false_changes}/{len(noisy)}",
    }


def _run_at(rev: str, trees: list[str]) -> list[dict[str, Any]]:
    """This script's measurement in a child process with ``crawler/`` from ``rev``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "crawler"], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, str(REPO)]))
        out = subprocess.run(
            [sys.executable, __file__, "--json", *[f"--tree={t}" for t in trees]],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
        ).stdout
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", choices=sorted(TREES), help="default: all")
    parser.add_argument("--rev", help="also measure crawler/ as it was at this git revision")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [n for n in (args.tree or sorted(TREES)) if (TREES[n] / "index.html").is_file()]
    if not names:
        sys.exit("no documentation tree installed (apt-get install postgresql-doc-15)")
    rows = [{"tree": n, "code": "now", **measure(TREES[n])} for n in names]
    if args.json:
        print(json.dumps(rows))
        return
    if args.rev:
        rows += [{**row, "code": args.rev} for row in _run_at(args.rev, names)]
    head = ["tree", "code", "pages", "with_links", "links", "signatures", "cpu_ms", "edits"]
    head.append("noise_counted")
    print(" | ".join(head))
    for row in sorted(rows, key=lambda r: (r["tree"], r["code"] == "now")):
        print(" | ".join(f"{row[h]:.2f}" if h == "cpu_ms" else str(row[h]) for h in head))


if __name__ == "__main__":
    main()

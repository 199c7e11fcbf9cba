"""docs/python-api.md runs: every ```python block, in order, in one namespace, must print
exactly the ```text block that follows it (a block followed by no text block must print
nothing).

Why blocks and not doctest: a notebook user copies a block whole, and a ``>>>`` prompt on
every line is in the way. The price is this small runner; it reports the block's line in the
page and a diff of the output. When an example's output changes on purpose, rewrite the
page's text blocks from a run with ``python tests/test_python_api_doc.py --write`` and read the
diff before committing it.

The page's examples import only from the packages' ``__init__`` (the API the page documents),
and the exports stay cheap to import; both are checked here too.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import io
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python-api.md"
PACKAGES = ("estimators", "planner", "store", "scenarios", "crawler", "service")

_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Example:
    """A ```python block: its code, the 1-based line of its first code line, and the output
    shown under it (None: no text block follows, so it must print nothing); ``output_lines``
    is the (start, end) slice of the page's lines the output block holds, for ``--write``."""

    code: str
    line: int
    output: str | None
    output_lines: tuple[int, int] | None


def examples(text: str) -> list[Example]:
    """The page's python blocks, each with the text block right after it (blank lines and
    prose between them end the pairing: a text block belongs to the code block it follows
    with nothing but blank lines between)."""
    lines = text.splitlines()
    blocks: list[tuple[str, int, int, int]] = []  # (language, first body line, end, fence line)
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"line {i + 1}: a ``` block is never closed")
        blocks.append((match.group(1), i + 1, end, i))
        i = end + 1
    out: list[Example] = []
    for k, (language, start, end, _fence) in enumerate(blocks):
        if language != "python":
            continue
        output = output_lines = None
        if k + 1 < len(blocks) and blocks[k + 1][0] == "text":
            _, o_start, o_end, o_fence = blocks[k + 1]
            if all(not line.strip() for line in lines[end + 1 : o_fence]):
                output = "\n".join(lines[o_start:o_end])
                output_lines = (o_start, o_end)
        out.append(Example("\n".join(lines[start:end]), start + 1, output, output_lines))
    return out


def run_example(example: Example, namespace: dict[str, object], source: str) -> str:
    """Execute one example in ``namespace``; what it printed."""
    buffer = io.StringIO()
    code = compile(example.code, f"{source}:{example.line}", "exec")
    with contextlib.redirect_stdout(buffer):
        exec(code, namespace)  # the page's own examples
    return buffer.getvalue()


def _normal(text: str) -> list[str]:
    """Lines without trailing blanks, and no blank lines at the end."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def mismatches(text: str, source: str) -> list[str]:
    """Run every example of ``text`` in order; one message per example whose output differs
    (an example that raises stops the run: the later ones depend on it)."""
    namespace: dict[str, object] = {"__name__": "__python_api_doc__"}
    found: list[str] = []
    for example in examples(text):
        try:
            printed = run_example(example, namespace, source)
        except Exception as error:  # an example that raises fails, with where
            found.append(f"{source}:{example.line}: the example raised {error!r}")
            break
        want = _normal(example.output or "")
        got = _normal(printed)
        if got != want:
            diff = "\n".join(
                difflib.unified_diff(want, got, "shown in the page", "printed", lineterm="")
            )
            found.append(f"{source}:{example.line}: output differs\n{diff}")
    return found


def test_the_page_prints_what_it_shows() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(examples(text)) >= 5, "one example per task at least"
    problems = mismatches(text, "docs/python-api.md")
    assert not problems, "\n\n".join(problems)


def test_every_example_shows_its_output() -> None:
    """A silent example is allowed by the runner, but on this page each one shows a result."""
    missing = [e.line for e in examples(PAGE.read_text(encoding="utf-8")) if e.output is None]
    assert missing == [], f"python blocks at lines {missing} have no ```text block after them"


_WRONG_PAGE = """
```python
x = 6 * 7
print(x)
```

```text
43
```
"""


def test_a_wrong_output_fails() -> None:
    """The runner itself: a changed number, a raising example and unexpected output fail."""
    found = mismatches(_WRONG_PAGE, "wrong.md")
    assert len(found) == 1 and found[0].startswith("wrong.md:3: output differs")
    assert "-43" in found[0] and "+42" in found[0]
    assert mismatches(_WRONG_PAGE.replace("43", "42"), "right.md") == []
    raising = mismatches("```python\n1 / 0\nprint('never')\n```\n", "raise.md")
    assert raising == ["raise.md:2: the example raised ZeroDivisionError('division by zero')"]
    silent = mismatches("```python\nprint('unexpected')\n```\n", "silent.md")
    assert len(silent) == 1 and "+unexpected" in silent[0]


def test_examples_import_only_from_the_packages() -> None:
    """The page documents the packages' exports: no ``from planner.cycle... import``."""
    pattern = re.compile(rf"^\s*(?:from|import)\s+((?:{'|'.join(PACKAGES)})\.[\w.]+)", re.MULTILINE)
    deep = [
        (e.line, m.group(1))
        for e in examples(PAGE.read_text(encoding="utf-8"))
        for m in pattern.finditer(e.code)
    ]
    assert deep == []


@pytest.mark.parametrize("package", ["estimators", "store"])
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_importing_estimators_loads_no_scipy_or_pandas() -> None:
    """``import estimators`` is cheap; a name's module loads on first use, and submodules
    import as before (``from estimators import evidence``)."""
    code = (
        "import sys, estimators; "
        "print(sorted(m for m in ('scipy', 'pandas') if m in sys.modules)); "
        "from estimators import evidence, PoissonChangeMLE; "
        "print(PoissonChangeMLE.__module__, evidence.__name__, 'scipy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "estimators.poisson estimators.evidence True"]


def _write(page: Path) -> int:
    """Rewrite the page's text blocks from a run (a missing one is not added: 1)."""
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    namespace: dict[str, object] = {"__name__": "__python_api_doc__"}
    status = 0
    outputs: list[tuple[tuple[int, int], list[str]]] = []
    for example in examples(text):
        printed = _normal(run_example(example, namespace, str(page)))
        if example.output_lines is not None:
            outputs.append((example.output_lines, printed))
        elif printed:
            print(f"{page}:{example.line}: prints, but has no text block", file=sys.stderr)
            status = 1
    for (start, end), printed in reversed(outputs):  # from the end: line numbers hold
        lines[start:end] = printed
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the output blocks")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args()
    if args.write:
        raise SystemExit(_write(args.page))
    problems = mismatches(args.page.read_text(encoding="utf-8"), str(args.page))
    print("\n\n".join(problems) or f"{args.page}: every example prints what it shows")
    raise SystemExit(1 if problems else 0)

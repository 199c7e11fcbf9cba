"""Run the README's tour of the CLI and write its console blocks, or check them.

README.md's section "A tour of the CLI" shows ``crawlplan`` commands with their real output.
Output captured by hand goes stale as the code moves on, so this script holds the tour as an
ordered list of steps, runs them, and either rewrites the README's console blocks from the
run (``--write``) or compares them with it (``--check``; tests/test_readme_tour.py does).

How a run goes, so that a newcomer can repeat every step by hand:

* a fresh temporary scratch directory holding a copy of ``docs/examples/`` (the commands name
  ``docs/examples/...`` as they would from a checkout), no ``crawlplan.toml`` and no
  ``CRAWLPLAN_*`` variables, and the ``crawlplan`` beside this Python first on ``PATH``;
* a step ending in `` &`` runs in the background (its output up to a line that says it is
  ready is what the README shows) and is stopped at the end, whatever happened;
* ``export NAME=VALUE`` sets a variable for the later steps, as a shell would;
* ``@name@`` in a command is a value known only during the run: ``@web0@`` .. ``@web2@``, the
  origins of the loopback web the first step starts (``crawlplan scenario web``), and
  ``@api_port@``, a free port;
* every step must exit as the tour says (0 unless ``rc`` says otherwise); a step with
  ``show_rc`` is followed by ``$ echo $?`` and its code, as a shell prints it.

``--check`` normalizes what varies from run to run on both sides before comparing: loopback
ports (numbered in order of appearance), durations in seconds, pages per second, dates and
times. It exits 1 naming the first block and line that differ, or the first step whose exit
code is not the tour's; 2 when the tour cannot run.

``--write`` rewrites every block, or none when the run matches the README after
normalizing (so that a run does not churn the ports).

Usage: ``python docs/tour.py --check`` or ``--write`` (from any directory; ``--readme FILE``
for another file, ``--show`` to print the run).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLES = ROOT / "docs" / "examples"

#: Seconds a foreground step may take, and a background step to say it is ready.
STEP_TIMEOUT = 180.0
READY_TIMEOUT = 60.0
#: Seconds a background step has to stop on SIGTERM before it is killed.
STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Step:
    """One ``$ command`` of the tour.

    ``rc`` is the exit code the step must have; ``show_rc`` prints ``$ echo $?`` after it;
    ``joined`` puts it right under the previous step (no blank line between); ``ready`` is the
    regular expression whose line in a background step's output says it is ready.
    """

    command: str
    rc: int = 0
    show_rc: bool = False
    joined: bool = False
    ready: str | None = None

    @property
    def background(self) -> bool:
        return self.command.endswith(" &")


@dataclass(frozen=True)
class Block:
    """One ```console block of the README, between ``<!-- tour:NAME -->`` markers."""

    name: str
    steps: tuple[Step, ...]


TOKEN = "tour-token-0123456789abcdef"
AUTH = '-H "Authorization: Bearer $CRAWLPLAN_API_TOKENS"'
JSON = '-H "Content-Type: application/json"'

TOUR: tuple[Block, ...] = (
    Block(
        "store",
        (
            Step(
                "crawlplan scenario web --hosts 3 --seeds-file web-seeds.txt &",
                ready=r"stop the web with Ctrl-C",
            ),
            Step("crawlplan init"),
            Step("crawlplan seed --file docs/examples/seeds.txt"),
            Step("crawlplan seed --now $(cat web-seeds.txt)"),
            Step(
                "crawlplan notify --sitemap docs/examples/sitemap.xml "
                "https://example.org/news --changed-at 2026-11-24T18:00:00Z"
            ),
            Step("crawlplan status"),
        ),
    ),
    Block(
        "nightly",
        (
            Step("crawlplan nightly --dry-run", rc=2, show_rc=True),
            Step("CRAWLPLAN_CAPACITY=40 crawlplan nightly --dry-run"),
            Step("CRAWLPLAN_CAPACITY=40 crawlplan nightly"),
            Step("CRAWLPLAN_CAPACITY=40 crawlplan nightly"),
        ),
    ),
    Block("release", (Step("crawlplan release"),)),
    Block(
        "api",
        (
            Step(f"export CRAWLPLAN_API_TOKENS={TOKEN}"),
            Step(
                "crawlplan serve --port @api_port@ --allow-private &",
                ready=r"worker API on ",
                joined=True,
            ),
            Step("curl -s http://127.0.0.1:@api_port@/health"),
            Step(f"curl -s {AUTH} http://127.0.0.1:@api_port@/v1/work", joined=True),
            Step(
                "curl -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:@api_port@/v1/plan",
                joined=True,
            ),
            Step(
                f'curl -s {AUTH} {JSON} -d \'{{"worker": "w1", "max_urls": 100000}}\' '
                "http://127.0.0.1:@api_port@/v1/leases"
            ),
            Step(
                f"curl -s {AUTH} {JSON} "
                '-d \'{"urls": ["@web0@/s1/p1.html", "ftp://x/"]}\' '
                "http://127.0.0.1:@api_port@/v1/urgent",
                joined=True,
            ),
            Step("crawlplan worker --api http://127.0.0.1:@api_port@ --seconds 3 --allow-private"),
            Step(
                "crawlplan worker --api http://127.0.0.1:@api_port@ "
                "--token wrong-token-0123456789 --seconds 3",
                rc=2,
                show_rc=True,
            ),
        ),
    ),
    Block(
        "files",
        (
            Step("crawlplan estimate"),
            Step(
                "crawlplan estimate --observations docs/examples/fetches.csv --out rates.csv",
                rc=1,
                show_rc=True,
            ),
            Step(
                "crawlplan schedule --pages docs/examples/pages.csv --bandwidth 12 "
                "--objective freshness --hosts docs/examples/hosts.csv "
                "--bounds docs/examples/bounds.csv --out schedule.csv"
            ),
            Step(r"printf 'src,dst\na,b\na,c\nb,c\nc,a\nd,c\n' > links.csv"),
            Step(
                "crawlplan importance --graph links.csv --visits 200 --out importance.csv",
                joined=True,
            ),
            Step("cat importance.csv"),
        ),
    ),
    Block("scenarios", (Step("crawlplan scenario list"),)),
)


class TourError(Exception):
    """The tour cannot run (no markers, a step that never got ready); the message says why."""


class ExitCodeError(TourError):
    """A step exited with another code than the tour says: the README would be wrong."""


# -- running ----------------------------------------------------------------------------------
@dataclass
class Background:
    """A background step's process, its output file and the output shown in the README."""

    process: subprocess.Popen[bytes]
    log: Path


def free_port() -> int:
    """A TCP port free on loopback now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_environment(scratch: Path) -> dict[str, str]:
    """The environment of every step: no CRAWLPLAN_* setting, this venv's bin first on PATH.

    ``PYTHONUNBUFFERED`` keeps stdout and stderr in the order a terminal would show them
    (both go to one pipe); ``NO_COLOR`` and ``TERM=dumb`` keep escape codes out; ``NO_PROXY``
    keeps a configured HTTP proxy out of the way to loopback (curl and requests obey it).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLPLAN_")}
    bin_dir = Path(sys.executable).parent
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env.update(PYTHONUNBUFFERED="1", NO_COLOR="1", TERM="dumb", COLUMNS="100", HOME=str(scratch))
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def substitute(command: str, values: dict[str, str]) -> str:
    """``command`` with each ``@name@`` replaced by its value in this run."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise TourError(f"{command!r}: @{name}@ is not known yet in the tour")
        return values[name]

    return re.sub(r"@(\w+)@", value, command)


def start_background(
    command: str, step: Step, scratch: Path, env: dict[str, str]
) -> tuple[Background, str]:
    """Start ``command`` (without its ``&``) in a process group of its own; wait until ready.

    Returns the process and its output up to the end of the line matching ``step.ready``.
    """
    log = scratch / f".tour-background-{free_port()}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command.removesuffix(' &')}"],
            cwd=scratch,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            process_group=0,
        )
    background = Background(process, log)
    pattern = re.compile(step.ready or r".")
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        text = log.read_text(errors="replace")
        found = pattern.search(text)
        if found:
            end = text.find("\n", found.end())
            return background, text[: len(text) if end < 0 else end]
        if process.poll() is not None:
            raise TourError(
                f"$ {command}: exited {process.returncode} before it was ready:\n{text}"
            )
        if time.monotonic() > deadline:
            raise TourError(f"$ {command}: not ready after {READY_TIMEOUT:.0f} s:\n{text}")
        time.sleep(0.1)


def stop(background: Background) -> None:
    """SIGTERM the background step's process group; SIGKILL it if it lingers."""
    pgid = background.process.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            background.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; kill what it left in its group (a spawned server, say).
        with suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        return


def run_foreground(command: str, scratch: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``command`` in bash in its own process group: exit code and stdout+stderr."""
    process = subprocess.Popen(
        ["bash", "-c", command],
        cwd=scratch,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        process_group=0,
    )
    try:
        output, _ = process.communicate(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise TourError(f"$ {command}: still running after {STEP_TIMEOUT:.0f} s") from None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, output.decode(errors="replace")


@contextmanager
def scratch_directory() -> Iterator[Path]:
    """A fresh temporary directory with a copy of ``docs/examples/``; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="crawlplan-tour-") as name:
        scratch = Path(name)
        shutil.copytree(EXAMPLES, scratch / "docs" / "examples")
        yield scratch


def run_tour(
    tour: tuple[Block, ...] = TOUR, on_block: Callable[[str, str], None] | None = None
) -> dict[str, str]:
    """Run every step; the console text of each block by name (without the ``` fences).

    ``on_block(name, text)`` is called as each block is done (``--show`` prints it).
    """
    backgrounds: list[Background] = []
    blocks: dict[str, str] = {}
    with scratch_directory() as scratch:
        env = clean_environment(scratch)
        values = {"api_port": str(free_port())}
        try:
            for block in tour:
                parts: list[str] = []
                for step in block.steps:
                    text = run_step(step, scratch, env, values, backgrounds)
                    if parts and not step.joined:
                        parts.append("")
                    parts.append(text)
                blocks[block.name] = "\n".join(parts)
                if on_block is not None:
                    on_block(block.name, blocks[block.name])
        finally:
            for background in reversed(backgrounds):
                stop(background)
    return blocks


def run_step(
    step: Step,
    scratch: Path,
    env: dict[str, str],
    values: dict[str, str],
    backgrounds: list[Background],
) -> str:
    """Run one step; its console text (``$ command`` and output). Raises TourError."""
    command = substitute(step.command, values)
    shown = f"$ {command}"
    exported = re.fullmatch(r"export (\w+)=(\S+)", command)
    if exported:
        env[exported.group(1)] = exported.group(2)
        return shown
    if step.background:
        background, output = start_background(command, step, scratch, env)
        backgrounds.append(background)
        if not values.get("web0"):
            origins = dict.fromkeys(re.findall(r"http://127\.0\.0\.1:\d+", output))
            values.update({f"web{i}": origin for i, origin in enumerate(origins)})
        return f"{shown}\n{output}".rstrip("\n")
    rc, output = run_foreground(command, scratch, env)
    if rc != step.rc:
        raise ExitCodeError(
            f"$ {command}: exit code {rc}, the tour says {step.rc}; output:\n{output}"
        )
    text = f"{shown}\n{output}".rstrip("\n")
    if step.show_rc:
        text += f"\n$ echo $?\n{rc}"
    return text


# -- the README -------------------------------------------------------------------------------
def _marker(name: str) -> re.Pattern[str]:
    """A block between its markers: groups (opening marker, console text, closing marker)."""
    name = re.escape(name)
    return re.compile(
        rf"(<!-- tour:{name} -->\n)```console\n(.*?)```\n(<!-- /tour:{name} -->)", re.DOTALL
    )


def readme_blocks(text: str, names: list[str]) -> dict[str, str]:
    """The console text between each block's markers (without fences). Raises TourError."""
    blocks: dict[str, str] = {}
    for name in names:
        found = _marker(name).search(text)
        if found is None:
            raise TourError(
                f"README has no block <!-- tour:{name} --> ```console ... ``` <!-- /tour:{name} -->"
            )
        blocks[name] = found.group(2).rstrip("\n")
    return blocks


def rewrite(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each marked block's console text replaced by ``blocks[name]``."""
    readme_blocks(text, list(blocks))  # every marker must be there
    for name, body in blocks.items():
        found = _marker(name).search(text)
        assert found is not None
        fenced = f"{found.group(1)}```console\n{body}\n```\n{found.group(3)}"
        text = text[: found.start()] + fenced + text[found.end() :]
    return text


_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
#: What varies from run to run, and what it reads as in a comparison.
VOLATILE: tuple[tuple[str, str], ...] = (
    (rf"{_DAY} {_MONTH} +\d+ \d\d:\d\d:\d\d \d{{4}}", "<time>"),
    (r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d| UTC)?)?", "<time>"),
    (r"\d+(?:\.\d+)? pages/s", "<n> pages/s"),
    (r"\b\d+(?:\.\d+)? s\b", "<n> s"),
    # Which estimator a page gets depends on its Last-Modified age at the fetch against the
    # clock tolerance: the synthetic web's dates lie a random time before its start, and the
    # fetch comes a few wall-clock seconds after it.
    (r"(estimated \d+ pages from \d+ fetches) \([^)]*\)", r"\1 (<estimators>)"),
)


def normalize(text: str) -> str:
    """``text`` with volatile figures replaced (see :data:`VOLATILE`); ports numbered."""
    ports: dict[str, str] = {}

    def port(match: re.Match[str]) -> str:
        number = ports.setdefault(match.group(2), f"<port{len(ports)}>")
        return f"{match.group(1)}{number}"

    text = re.sub(r"(127\.0\.0\.1:|--port )(\d+)", port, text)
    for pattern, replacement in VOLATILE:
        text = re.sub(pattern, replacement, text)
    return text


def first_difference(name: str, readme: str, fresh: str) -> str | None:
    """A message naming the first line where the normalized texts differ, or None."""
    old, new = normalize(readme).splitlines(), normalize(fresh).splitlines()
    for number, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a != b:
            return (
                f"block {name!r}, line {number}:\n  README: {readme.splitlines()[number - 1]}\n"
                f"  run:    {fresh.splitlines()[number - 1]}"
            )
    if len(old) != len(new):
        longer, which = (old, "README") if len(old) > len(new) else (new, "run")
        line = len(min(old, new, key=len)) + 1
        return f"block {name!r}, line {line}: only the {which} has {longer[line - 1]!r}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare README with a fresh run")
    mode.add_argument("--write", action="store_true", help="rewrite README's tour blocks")
    parser.add_argument("--readme", type=Path, default=README, help="the file with the blocks")
    parser.add_argument("--show", action="store_true", help="print the run's blocks")
    args = parser.parse_args(argv)

    def show(name: str, body: str) -> None:
        print(f"<!-- tour:{name} -->\n{body}\n", flush=True)

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)  # so that the background steps are stopped

    signal.signal(signal.SIGTERM, interrupted)
    try:
        text = args.readme.read_text(encoding="utf-8")
        names = [block.name for block in TOUR]
        readme_blocks(text, names)
        fresh = run_tour(on_block=show if args.show else None)
    except (TourError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1 if isinstance(error, ExitCodeError) else 2
    old = readme_blocks(text, names)
    differences = [first_difference(name, old[name], fresh[name]) for name in names]
    difference = next((d for d in differences if d), None)
    if args.write:
        # All blocks or none: the blocks share ports, and a run that differs only in what
        # varies anyway (ports, seconds, dates) is no reason to churn the README.
        if difference is None:
            print(f"{args.readme}: {len(names)} tour blocks match a fresh run; left as they are")
            return 0
        args.readme.write_text(rewrite(text, fresh), encoding="utf-8")
        print(f"wrote {len(fresh)} tour blocks to {args.readme}; the first change:\n{difference}")
        return 0
    if difference is not None:
        print(f"{args.readme} is out of date (python docs/tour.py --write):\n{difference}")
        return 1
    print(f"{args.readme}: {len(names)} tour blocks match a fresh run")
    return 0


if __name__ == "__main__":
    sys.exit(main())

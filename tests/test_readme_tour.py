"""README's tour of the CLI is current: docs/tour.py runs it and compares (``--check``).

The tour starts background processes (a loopback web, the worker API). The script stops them
itself; the test checks that it did, and kills whatever is left of the script's session in a
``finally``, so that a failed or timed-out run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "docs" / "tour.py"
#: Seconds the whole tour may take on a loaded 2-core machine (it takes about 90).
TOUR_TIMEOUT = 480


def load_tour() -> ModuleType:
    """docs/tour.py as a module (it is a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("readme_tour", TOUR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def session_members(sid: int) -> list[int]:
    """Process ids of the live processes in session ``sid`` (from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...; comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry.name))
    return members


def kill_session(sid: int) -> None:
    """SIGKILL every process group of session ``sid``."""
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(TOUR_TIMEOUT + 60)
def test_readme_tour_matches_a_fresh_run() -> None:
    process = subprocess.Popen(
        [sys.executable, str(TOUR), "--check"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=TOUR_TIMEOUT)
        left = session_members(process.pid)
    finally:
        kill_session(process.pid)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    assert "tour blocks match a fresh run" in output
    assert left == [], f"the tour left processes behind: {left}"


def test_normalize_numbers_ports_by_first_appearance() -> None:
    tour = load_tour()
    one = "--port 4001; http://127.0.0.1:4001/a, http://127.0.0.1:4002/b, 127.0.0.1:4001"
    two = "--port 5107; http://127.0.0.1:5107/a, http://127.0.0.1:5003/b, 127.0.0.1:5107"
    swapped = "--port 5107; http://127.0.0.1:5107/a, http://127.0.0.1:5003/b, 127.0.0.1:5003"
    assert tour.normalize(one) == tour.normalize(two)
    assert tour.normalize(one) != tour.normalize(swapped)


def test_normalize_hides_times_and_durations_but_not_counts() -> None:
    tour = load_tour()
    old = "from 2026-11-22 00:00:00 UTC: 3 (1.0 pages/s) in 0.0 s, Sun Nov 22 00:00:00 2026"
    new = "from 2026-11-25 00:00:00 UTC: 3 (1.3 pages/s) in 12.5 s, Wed Nov 25 00:00:00 2026"
    assert tour.normalize(old) == tour.normalize(new)
    assert tour.normalize(old) != tour.normalize(new.replace(": 3 (", ": 4 ("))


def test_first_difference_names_block_and_line() -> None:
    tour = load_tour()
    readme = "$ crawlplan init\ninitialized (schema revision 0007)"
    fresh = "$ crawlplan init\ninitialized (schema revision 0013)"
    message = tour.first_difference("store", readme, fresh)
    assert message is not None
    assert "block 'store', line 2" in message
    assert "0007" in message and "0013" in message
    assert tour.first_difference("store", fresh, fresh) is None
    assert "only the run has" in tour.first_difference("store", fresh, fresh + "\nmore")


def test_rewrite_replaces_only_the_marked_blocks() -> None:
    tour = load_tour()
    text = (
        "intro\n<!-- tour:a -->\n```console\n$ old\n```\n<!-- /tour:a -->\n"
        "```console\n$ untouched\n```\n"
    )
    new = tour.rewrite(text, {"a": "$ new\noutput"})
    assert new == text.replace("$ old", "$ new\noutput")
    assert tour.readme_blocks(new, ["a"]) == {"a": "$ new\noutput"}
    with pytest.raises(tour.TourError, match="tour:b"):
        tour.rewrite(text, {"b": "$ x"})


def test_run_tour_renders_steps_as_a_console() -> None:
    tour = load_tour()
    block = tour.Block(
        "b",
        (
            tour.Step("export GREETING=hello"),
            tour.Step("echo $GREETING; echo oops >&2", joined=True),
            tour.Step("ls docs/examples/seeds.txt"),
            tour.Step("exit 2", rc=2, show_rc=True, joined=True),
        ),
    )
    assert tour.run_tour((block,)) == {
        "b": "$ export GREETING=hello\n$ echo $GREETING; echo oops >&2\nhello\noops\n\n"
        "$ ls docs/examples/seeds.txt\ndocs/examples/seeds.txt\n$ exit 2\n$ echo $?\n2"
    }


def test_a_failing_step_stops_the_background_steps() -> None:
    tour = load_tour()
    block = tour.Block(
        "b",
        (
            tour.Step("sh -c 'echo $$ > bg.pid; echo ready; exec sleep 60' &", ready="ready"),
            tour.Step("cat bg.pid; exit 3"),
        ),
    )
    with pytest.raises(tour.ExitCodeError, match="exit code 3") as info:
        tour.run_tour((block,))
    found = re.search(r"output:\n(\d+)", str(info.value))
    assert found is not None
    with pytest.raises(ProcessLookupError):
        os.kill(int(found.group(1)), 0)

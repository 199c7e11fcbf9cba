"""Issue 26 at the edge: secrets, read-only files, huge sizes, seed files, interruption.

Each test runs the real console script, as a user meets it, and checks for one line and a
non-zero exit where a traceback used to be.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_cli import CRAWLPLAN, assert_one_line_error, run


def test_config_masks_the_database_password_and_the_api_tokens(tmp_path: Path) -> None:
    proc = run(
        "config",
        cwd=tmp_path,
        env={
            "CRAWLPLAN_DB_URL": "postgresql://crawler:hunter2secret@db.test:5432/crawlplan",
            "CRAWLPLAN_API_TOKENS": "tok-aaaaaaaaaaaaaaaa,tok-bbbbbbbbbbbbbbbb",
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert "hunter2secret" not in proc.stdout
    assert "aaaaaaaa" not in proc.stdout and "bbbbbbbb" not in proc.stdout
    assert "postgresql://crawler:***@db.test:5432/crawlplan" in proc.stdout
    assert "*** (2 tokens)" in proc.stdout


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory holding a crawlplan database, bind-mounted read-only (needs root: skipped
    where mount is not allowed)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    assert run("init", "--db", f"sqlite:///{ro / 'crawlplan.db'}", cwd=tmp_path).returncode == 0
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a read-only mount needs root")
    mounted = subprocess.run(["mount", "--bind", str(ro), str(ro)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mount --bind refused: {mounted.stderr.strip()!r}")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(ro)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            pytest.skip("remount read-only refused")
        yield ro
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


@pytest.mark.parametrize("args", [("seed", "http://a.test/"), ("init",), ("status",)])
def test_commands_on_a_read_only_file_system_say_so_in_one_line(
    read_only_dir: Path, args: tuple[str, ...]
) -> None:
    proc = run(*args, cwd=read_only_dir)
    assert_one_line_error(proc, "read-only file system", str(read_only_dir))


def test_seed_rejects_to_a_read_only_file_system_is_one_line(
    read_only_dir: Path, tmp_path: Path
) -> None:
    run("init", cwd=tmp_path)
    (tmp_path / "seeds.txt").write_text("http://a.test/\nnot a url\n")
    rejects = str(read_only_dir / "rejects.tsv")
    proc = run("seed", "--file", "seeds.txt", "--rejects", rejects, cwd=tmp_path)
    assert_one_line_error(proc, "rejects.tsv", "Read-only file system")


def test_the_writer_queue_goes_on_without_its_file_where_it_cannot_create_it(
    tmp_path: Path,
) -> None:
    """A directory nobody may write (here: a path under a regular file) leaves SQLite's own
    locking to decide, rather than a traceback from the queue's lock file."""
    from store.database import _WriterLock

    (tmp_path / "a-file").write_text("")
    lock = _WriterLock(tmp_path / "a-file" / "crawlplan.db")
    with lock.held():
        pass


@pytest.mark.parametrize("bandwidth", ["1e-300", "1e308", "1e-13", "2e15"])
def test_schedule_bandwidth_out_of_range_is_one_line_and_no_file(
    tmp_path: Path, bandwidth: str
) -> None:
    """1e-300 overflowed (a traceback); 1e308 wrote a CSV of NaN and exited 0."""
    (tmp_path / "pages.csv").write_text("page,rate\nhttp://a.test/1,0.5\nhttp://a.test/2,2\n")
    proc = run(
        "schedule",
        "--pages",
        "pages.csv",
        "--bandwidth",
        bandwidth,
        "--out",
        "s.csv",
        cwd=tmp_path,
    )
    assert_one_line_error(
        proc, "bandwidth must be between 1e-12 and 1e+15", f"got {float(bandwidth):g}"
    )
    assert not (tmp_path / "s.csv").exists()


def test_schedule_bandwidth_bounds_are_finite_for_every_objective() -> None:
    import numpy as np

    from planner.schedules.optimal import MAX_BANDWIDTH, MIN_BANDWIDTH, refresh_schedule

    rate = np.random.default_rng(26).lognormal(0.0, 3.0, 500)
    for bandwidth in (MIN_BANDWIDTH, MAX_BANDWIDTH):
        for objective in ("obsolescence", "freshness", "harmonic", "binary"):
            s = refresh_schedule(rate, bandwidth, objective=objective)
            assert np.isfinite(s.refresh_rate).all() and np.isfinite(s.value), (
                bandwidth,
                objective,
            )


def test_solve_with_a_hundred_million_periods_is_refused_before_building(tmp_path: Path) -> None:
    """It ran out of memory (a 190 GiB array) with a traceback."""
    instance = {
        "periods": 100_000_000,
        "buckets": 2,
        "b0": [10.0, 10.0],
        "y0": [1.0, 1.0],
        "n0": 5.0,
        "nconst": 1.0,
        "capacity": 4.0,
        "crawl_cost": 1.0,
        "new_crawl_cost": 1.0,
        "oldnwt": 1.0,
        "newnwt": 1.0,
        "change_rate": [0.1, 1.0],
    }
    (tmp_path / "big.json").write_text(json.dumps(instance))
    proc = run("solve", "big.json", cwd=tmp_path)
    assert_one_line_error(proc, "200,000,000 model cells", "at most 50,000")
    from planner.model.instance import InstanceError
    from planner.model.paper_instances import paper_instance

    with pytest.raises(InstanceError, match=r"25,500,000,000 model cells.*at most 392"):
        paper_instance(1, periods=100_000_000)  # `solve --paper 1 --periods 100000000`


#: Runs the command in argv and prints its peak memory (kB) on stderr's last line.
_PEAK_MEMORY = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "print('maxrss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(r.returncode)"
)


def test_a_seed_file_with_huge_and_undecodable_lines(tmp_path: Path) -> None:
    """A 10 MB line used 1.3 GB and a schemeless one wrote 21 MB to stderr; non-UTF-8 bytes
    were stored as U+FFFD. Now: cut short, said, and the good lines stored."""
    run("init", cwd=tmp_path)
    with (tmp_path / "seeds.txt").open("wb") as f:
        f.write(b"\xef\xbb\xbfhttp://ok.test/1\n")
        f.write(b"x" * 10_000_000 + b"\n")
        f.write(b"http://ok.test/caf\xe9\n")
        f.write(b"y" * 5_000 + b"\n")
        f.write(b"http://ok.test/2")
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_MEMORY, *CRAWLPLAN, "seed", "--file", "seeds.txt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[:2000]
    assert "Traceback" not in proc.stderr and len(proc.stderr) < 2_000, proc.stderr[:2000]
    assert "seeded 2 new pages" in proc.stdout
    lines = proc.stderr.splitlines()
    assert "rejected line 2: 'xxxx" in proc.stderr and "a line of 10,000,001 bytes" in lines[0]
    assert "rejected line 3: 'http://ok.test/caf\\\\xe9' is not UTF-8: byte 0xe9" in lines[1]
    assert "(5,000 characters) has no scheme" in lines[2]
    assert "error: 3 malformed URLs were not seeded" in lines[3]
    peak_kb = int(lines[-1].split()[-1])
    assert peak_kb < 300_000, f"seed peaked at {peak_kb:,} kB"
    status = json.loads(run("status", "--json", cwd=tmp_path).stdout)
    assert status["pages"] == 2


def test_a_huge_url_is_refused_before_it_is_normalized() -> None:
    import time

    from crawler.urls import InvalidURLError, normalize_url

    started = time.perf_counter()
    with pytest.raises(InvalidURLError) as error:
        normalize_url("http://a.test/" + "a" * 10_000_000)
    assert time.perf_counter() - started < 1.0
    assert len(str(error.value)) < 300 and "10,000,014 characters" in str(error.value)


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has installed a handler for ``signum`` (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


def test_crawl_interrupted_exits_128_plus_the_signal(tmp_path: Path) -> None:
    """The README says an interrupted command exits 130; crawl exited 0 on SIGINT and
    SIGTERM. Now: 130 for SIGINT, 143 for SIGTERM, after the summary line."""
    run("init", cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLPLAN_")}
    procs = {
        sig: subprocess.Popen(
            [*CRAWLPLAN, "crawl", "--workers", "1"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        deadline = time.monotonic() + 60
        while not all(_catches(p.pid, signal.SIGTERM) for p in procs.values()):
            assert time.monotonic() < deadline, "crawl never set up its signal handlers"
            assert all(p.poll() is None for p in procs.values())
            time.sleep(0.05)
        for sig, proc in procs.items():
            proc.send_signal(sig)
        for sig, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=60)
            assert proc.returncode == 128 + sig, (sig, stdout, stderr)
            assert "Traceback" not in stderr
            assert f"{sig.name}: finishing in-flight fetches" in stderr
            assert "fetched 0" in stdout, stdout
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_hundred_million_plan_periods_is_a_config_error(tmp_path: Path) -> None:
    """A nightly dry run with plan.periods = 100000000 took 15 GB and two minutes on a cold
    store (per-period new-page quotas) before this bound."""
    from planner.model.instance import MAX_MODEL_CELLS
    from service.config import MAX_PLAN_PERIODS

    assert MAX_PLAN_PERIODS == MAX_MODEL_CELLS  # the model's cells over one bucket
    proc = run("nightly", "--dry-run", cwd=tmp_path, env={"CRAWLPLAN_PERIODS": "100000000"})
    assert_one_line_error(proc, "plan.periods must be <= 100,000", "100000000")


def test_a_schedule_whose_arithmetic_failed_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard behind the bandwidth bounds: a NaN schedule is exit 1 and no file."""
    from dataclasses import replace

    import numpy as np
    from typer.testing import CliRunner

    import planner.schedules.optimal as optimal
    from service.cli.app import app

    real = optimal.refresh_schedule

    def nan_schedule(*args: object, **kwargs: object) -> object:
        s = real(*args, **kwargs)  # type: ignore[arg-type]
        return replace(s, refresh_rate=np.full_like(s.refresh_rate, np.nan))

    monkeypatch.setattr(optimal, "refresh_schedule", nan_schedule)
    (tmp_path / "pages.csv").write_text("page,rate\nhttp://a.test/1,0.5\n")
    out = tmp_path / "s.csv"
    result = CliRunner().invoke(
        app, ["schedule", "--pages", str(tmp_path / "pages.csv"), "-g", "1", "--out", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "arithmetic failed (NaN)" in result.output and not out.exists()

"""``crawlplan scenario web``: the tour's synthetic web on loopback, crawled for real.

Starts the command as a user would, seeds a fresh store from the seeds file it writes, crawls
it with ``crawlplan crawl --allow-private --until-idle`` and stops the web with SIGINT.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import requests

CLI = [sys.executable, "-m", "service"]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def _wait_for(path: Path, web: subprocess.Popen[str]) -> list[str]:
    """The seed URLs, once the web has written them (or fail if the web died first)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if web.poll() is not None:
            raise AssertionError(f"the web exited early: {web.communicate()}")
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text().splitlines()
        time.sleep(0.1)
    raise AssertionError("the web wrote no seeds file within 120 s")


def test_the_tour_web_serves_loopback_is_crawled_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    web = subprocess.Popen(
        [*CLI, "scenario", "web", "--hosts", "3", "--pages", "8", "--seeds-file", str(seeds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        urls = _wait_for(seeds, web)
        assert len(urls) == 3  # each host's first page
        assert all(urlsplit(u).hostname == "127.0.0.1" for u in urls)
        assert len({urlsplit(u).port for u in urls}) == 3  # one port per host
        for url in urls:
            page = requests.get(url, timeout=10)
            assert page.status_code == 200 and "<a href" in page.text
            origin = f"http://127.0.0.1:{urlsplit(url).port}"
            assert requests.get(origin + "/sitemap.xml", timeout=10).status_code == 200

        db = f"sqlite:///{tmp_path / 'tour.db'}"
        env = {**os.environ, "CRAWLPLAN_DB_URL": db, "CRAWLPLAN_MIN_DELAY": "0.05"}
        env.pop("CRAWLPLAN_CONFIG", None)
        assert _cli("init", env=env).returncode == 0
        seeded = _cli("seed", "--file", str(seeds), env=env)
        assert seeded.returncode == 0, seeded.stderr
        assert seeded.stdout.startswith("seeded 3 new pages on 3 new hosts")
        crawled = _cli("crawl", "--allow-private", "--until-idle", "--seconds", "120", env=env)
        assert crawled.returncode == 0, crawled.stderr
        status = json.loads(_cli("status", "--json", env=env).stdout)
        # The crawl followed links (more pages than the seeds, all on the web's 3 hosts).
        assert status["pages"] > 3 and status["observations"] >= 3
        assert status["hosts"] == 3
    finally:
        web.send_signal(signal.SIGINT)
        stdout, stderr = web.communicate(timeout=60)
    assert web.returncode == 0, stderr
    assert stdout.splitlines() == urls
    assert "synthetic web stopped" in stderr

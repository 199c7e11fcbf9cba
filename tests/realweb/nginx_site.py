"""A real static site on loopback: nginx (from Debian) serving a copy of a Debian HTML
documentation tree, for the tests in ``tests/realweb/``.

The copy is the test's to edit. nginx writes an access log with ``$msec`` (the time a
request ended, in milliseconds) and ``$request_time``, so a test checks politeness from the
server's own record, and adds per-request noise to every HTML page with ``sub_filter`` (the
local time and a random request id), as real sites do with their timestamps and tokens
(``noise=False``: the files as they are).

``hosts=N`` serves the same tree as N hosts, one server block each on its own loopback
address, ``127.0.0.1`` to ``127.0.0.N`` (a free port on each): hosts a crawler, and Scrapy,
tell apart by their IP address, not only by their port (Scrapy's per-domain slots are keyed
by the host name alone).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote, urljoin, urlsplit

import lxml.html

__all__ = ["DOC_TREE", "LoggedRequest", "NginxSite", "edit_page", "missing", "reachable_pages"]

#: The documentation tree served (Debian ``postgresql-doc-15``: 1,169 XHTML pages that start
#: with an ``<?xml ... encoding="UTF-8"?>`` declaration, 18 MB).
DOC_TREE = Path("/usr/share/doc/postgresql-doc-15/html")
NGINX_CANDIDATES = ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
MIME_TYPES = Path("/etc/nginx/mime.types")

#: The noise nginx adds to every HTML page, before ``</body>``: a teaser picked per request
#: (words: no mask of the signature's hides it, a learned noise rule must), then the time, a
#: visitor number and a random request id (masked by their look).
NOISE = (
    '<div class="teaser">Read next: $teaser</div>'
    '<p class="served">Served $time_local to visitor $connection_requests, '
    "request $request_id</p></body>"
)
#: The teasers, by the first hex digit of nginx's random ``$request_id``: 16, so that three
#: twin fetches all see the first one's with probability 1/4096.
TEASERS = """
    map $request_id $teaser {
        ~^0 "Tuning the planner with cost settings";
        ~^1 "Logical replication between clusters";
        ~^2 "Indexes on expressions and partial indexes";
        ~^3 "Backup and restore with continuous archiving";
        ~^4 "Full text search with ranking";
        ~^5 "Row security policies for tables";
        ~^6 "Parallel query and its workers";
        ~^7 "Write ahead log and checkpoints";
        ~^8 "Foreign data wrappers for remote tables";
        ~^9 "Vacuum and the visibility map";
        ~^a "Window functions over partitions";
        ~^b "Table partitioning by range and list";
        ~^c "Triggers and event triggers";
        ~^d "Collations and character sets";
        ~^e "Hot standby and streaming replication";
        default "Procedural languages and functions";
    }"""

CONFIG = """
{user}
worker_processes {workers};
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 256; }}
http {{
    include {mime_types};
    default_type application/octet-stream;
    log_format timed '$msec $request_time $status "$request_uri" $body_bytes_sent '
                     '$server_addr:$server_port';
    access_log {root}/access.log timed;
    client_body_temp_path {root}/tmp;
    proxy_temp_path {root}/tmp;
    fastcgi_temp_path {root}/tmp;
    uwsgi_temp_path {root}/tmp;
    scgi_temp_path {root}/tmp;{teasers}
{servers}
}}
"""

SERVER = """
    server {{
        listen {address}:{port};
        root {site};
        index index.html;{noise}
    }}"""

SUB_FILTER = """
        sub_filter '</body>' '{noise}';
        sub_filter_once on;
        sub_filter_last_modified on;"""


def nginx_binary() -> str | None:
    """The nginx executable, or None."""
    found = shutil.which("nginx")
    if found:
        return found
    return next((c for c in NGINX_CANDIDATES if os.access(c, os.X_OK)), None)


def missing() -> str | None:
    """Why the real-web tests cannot run here, or None."""
    if nginx_binary() is None:
        return "nginx is not installed (make setup installs it with apt-get where it can)"
    if not (DOC_TREE / "index.html").is_file():
        return f"{DOC_TREE} is missing (Debian package postgresql-doc-15; make setup installs it)"
    if not MIME_TYPES.is_file():
        return f"{MIME_TYPES} is missing (it comes with Debian's nginx)"
    return None


@dataclass(frozen=True)
class LoggedRequest:
    """One line of nginx's access log."""

    end: float  # $msec: when the request ended (epoch seconds, millisecond resolution)
    seconds: float  # $request_time
    status: int
    path: str
    server: str = ""  # the host that answered: "$server_addr:$server_port"

    @property
    def start(self) -> float:
        return self.end - self.seconds


class NginxSite:
    """nginx on a free loopback port serving ``site`` (a directory the caller owns); with
    ``hosts`` > 1, as that many hosts (``origins``; ``origin`` is the first). ``noise``:
    per-request noise in every HTML page; ``workers``: nginx's worker processes."""

    def __init__(
        self,
        site: Path,
        workdir: Path,
        *,
        hosts: int = 1,
        noise: bool = True,
        workers: int = 1,
    ) -> None:
        if not 1 <= hosts <= 254:
            raise ValueError(f"hosts must be 1 to 254 (127.0.0.1 to 127.0.0.254), got {hosts}")
        self.site = site
        self.workdir = workdir
        self.noise = noise
        self.workers = workers
        addresses = [f"127.0.0.{n}" for n in range(1, hosts + 1)]
        self.listen = [(address, _free_port(address)) for address in addresses]
        self.origins = [f"http://{address}:{port}" for address, port in self.listen]
        self.port = self.listen[0][1]
        self.origin = self.origins[0]
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> NginxSite:
        binary = nginx_binary()
        assert binary is not None, "check missing() first"
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "nginx.conf"
        noise = SUB_FILTER.format(noise=NOISE) if self.noise else ""
        servers = "".join(
            SERVER.format(address=address, port=port, site=self.site, noise=noise)
            for address, port in self.listen
        )
        conf.write_text(
            CONFIG.format(
                # as root, nginx's workers would drop to "nobody", who cannot read a tmp dir
                user="user root;" if os.geteuid() == 0 else "",
                workers=self.workers,
                root=self.workdir,
                mime_types=MIME_TYPES,
                servers=servers,
                teasers=TEASERS,
            )
        )
        self._process = subprocess.Popen(
            # -e: the error log from the start (not the system's /var/log/nginx)
            [
                binary,
                "-c",
                str(conf),
                "-p",
                str(self.workdir),
                "-e",
                str(self.workdir / "error.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 10
        waiting = list(self.listen)
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                err = self._process.stderr.read().decode() if self._process.stderr else ""
                raise RuntimeError(f"nginx exited at start: {err.strip()}")
            try:
                socket.create_connection(waiting[0], timeout=0.2).close()
                waiting.pop(0)
                if not waiting:
                    return self
            except OSError:
                time.sleep(0.02)
        self.__exit__(None, None, None)
        raise RuntimeError("nginx did not listen within 10 s")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGQUIT)  # graceful: finish, flush the log
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process is not None and self._process.stderr is not None:
            self._process.stderr.close()
        self._process = None

    def log(self) -> list[LoggedRequest]:
        """Every request nginx has logged, in order."""
        path = self.workdir / "access.log"
        if not path.exists():
            return []
        found = []
        for line in path.read_text().splitlines():
            end, seconds, status, request_uri, _size, server = line.split(" ", 5)
            found.append(
                LoggedRequest(float(end), float(seconds), int(status), request_uri[1:-1], server)
            )
        return found


def _free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        port: int = s.getsockname()[1]
        return port


def reachable_pages(root: Path, disallowed: str | None = None) -> set[str]:
    """URL paths of the HTML files reachable by ``<a href>`` from ``/`` (the directory's
    index.html), not entering paths that start with ``disallowed`` (what robots.txt
    disallows): lxml on the files, no crawler code."""
    found: set[str] = set()
    todo = ["/index.html"]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        tree = lxml.html.parse(str(root / path.lstrip("/")))
        for anchor in tree.getroot().iter("a", "area"):
            href = anchor.get("href")
            if not href:
                continue
            target = urlsplit(urljoin(f"http://site{path}", href.strip()))
            if target.netloc != "site" or not target.path.endswith(".html"):
                continue
            target_path = unquote(target.path)
            file = root / target_path.lstrip("/")
            if file.is_file() and not (disallowed and target_path.startswith(disallowed)):
                todo.append(target_path)
    return found


def edit_page(file: Path, number: int) -> None:
    """A real edit: a paragraph added to the page's content, before its footer navigation."""
    html = file.read_text(encoding="utf-8")
    paragraph = (
        f'<p class="note">Editorial note {number}: this section now also explains how the '
        "setting interacts with replication, with an example of a safe rollout.</p>"
    )
    marker = '<div class="navfooter">' if '<div class="navfooter">' in html else "</body>"
    file.write_text(html.replace(marker, paragraph + marker, 1), encoding="utf-8")

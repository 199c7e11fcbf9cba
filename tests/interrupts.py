"""Starting a command that a test will stop with SIGINT, as Ctrl-C in a terminal does.

A shell without job control starts its background jobs (``make test &``, a CI runner's
detached step) with SIGINT ignored, and children inherit that; Python then installs no
KeyboardInterrupt handler, so a command that rightly keeps its inherited disposition never
sees the test's SIGINT. The tests' commands stand for one started from a terminal: they get
the default disposition back before they start.
"""

from __future__ import annotations

import signal

__all__ = ["interruptible"]


def interruptible() -> None:
    """``preexec_fn`` for :class:`subprocess.Popen`: SIGINT back to its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

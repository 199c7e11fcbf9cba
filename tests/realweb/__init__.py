"""The crawler against real static sites on loopback (nginx serving a Debian doc tree)."""

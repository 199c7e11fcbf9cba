"""The ``crawlplan`` command line (Typer): one module per command or group, wiring only."""

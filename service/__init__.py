"""The service edge, the composition root: CLI, nightly pipeline, worker API, config, demo.

The only package that wires ``store``, ``crawler``, ``estimators``, ``planner`` and ``scenarios``
together. It reads configuration, builds objects and calls them; planning logic lives in
``planner``, persistence in ``store``, web I/O in ``crawler``.

Imports: everything (it is the top layer of the import-linter contract in ``pyproject.toml``).
"""

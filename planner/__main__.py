"""``python -m planner`` runs the crawlplan CLI (the same as the ``crawlplan`` script)."""

from planner.cli import main

main()

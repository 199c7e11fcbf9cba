"""``python -m service`` runs the crawlplan CLI (the same as the ``crawlplan`` script)."""

from service.cli.app import main

main()

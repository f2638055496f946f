"""``python -m kayak`` runs the command line."""

from kayak.cli import main

main()

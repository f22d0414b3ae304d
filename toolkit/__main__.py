"""`python -m jobkit` runs the CLI."""

from jobkit.cli import main

main()

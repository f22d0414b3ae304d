"""`python -m jobkit` runs the CLI."""

from .cli import main

main()

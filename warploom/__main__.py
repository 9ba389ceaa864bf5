"""`python -m warploom ...` is the `warploom` command (from a source tree, without installing)."""

from warploom.cli import main

main()

"""``python -m tunedsl``: hand over to the CLI."""

from .cli import entry

raise SystemExit(entry())

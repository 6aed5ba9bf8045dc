"""``python -m tunedsl``: hand over to the CLI."""

from .cli import main

raise SystemExit(main())
